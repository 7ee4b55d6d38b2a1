"""Shared test helpers: small scenarios built directly from the spec (no YAML), and the benchmark
scripts loaded as modules."""

from __future__ import annotations

from dataclasses import replace

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from commsim.scenario.spec import DDP, Cluster, Compute, DDPCosts, Link, Model, Scenario

# DDP's own costs all off (commsim/sim/ddp_costs.py): the schedule the closed forms of most tests
# describe. Tests of the costs pass costs=DDPCosts() (the scenario default) or their own.
NO_DDP_COSTS = DDPCosts(bucket_overhead=0.0, gradient_as_bucket_view=True, overlap_slowdown=0.0)

# Property tests draw the same examples on every run, so that a CI run cannot fail on an example no
# earlier run drew (a randomized run once found a new reader bug in CI: a flaky test is a defect).
# Random exploration is a separate, deliberate run:  HYPOTHESIS_PROFILE=explore python -m pytest tests
# No deadline and no too-slow health check: Hypothesis' default 200 ms deadline fails an example
# that a loaded machine runs slowly (timing is never what these tests check).
_UNTIMED = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("deterministic", derandomize=True, database=None, **_UNTIMED)
settings.register_profile("explore", derandomize=False, max_examples=2000, **_UNTIMED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module (the scripts are not a package). It is registered in
    sys.modules before it runs, because dataclasses look their module up while it loads."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def make_scenario(
    nodes=2,
    gpus_per_node=4,
    parameters=10_000_000,
    grad_dtype="fp32",
    forward=0.05,
    backward=0.1,
    optimizer=0.01,
    batch_size=8,
    intra=(300e9, 1e-6),
    inter=(12.5e9, 5e-6),
    bucket_cap=25e6,
    first_bucket=1e6,
    overlap=True,
    accumulation=1,
    steps=5,
    seed=0,
    stragglers=(),
    name="test",
    sharding="none",
    costs=NO_DDP_COSTS,
):
    return Scenario(
        name=name,
        cluster=Cluster(nodes, gpus_per_node, Link(*intra), Link(*inter)),
        model=Model(parameters, grad_dtype),
        compute=Compute(forward, backward, optimizer, batch_size),
        ddp=DDP(bucket_cap=bucket_cap, first_bucket=first_bucket, overlap=overlap, gradient_accumulation=accumulation,
                sharding=sharding, costs=costs),
        steps=steps,
        seed=seed,
        stragglers=tuple(stragglers),
    )


@pytest.fixture
def scenario_factory():
    return make_scenario


__all__ = ["make_scenario", "replace", "NO_DDP_COSTS"]


def write_ring_scenario(tmp_path, gpus: int = 8, cap: str = "64 KiB", extra: str = "") -> Path:
    """A one-node scenario file whose ring has every hop alike (5 us, 100 GB/s): the one-node closed
    form of the ring's time, T(S) = 2(n-1) (alpha + S / (n beta)), holds for its buckets."""
    path = Path(tmp_path) / "ring.yaml"
    path.write_text(f"""name: ring
steps: 2
cluster:
  nodes: 1
  gpus_per_node: {gpus}
  intra_node: {{bandwidth: 100 GB/s, latency: 5 us}}
  inter_node: {{bandwidth: 10 GB/s, latency: 10 us}}
model: {{parameters: 1e6, grad_dtype: fp32}}
compute: {{forward: 1 ms, backward: 2 ms}}
ddp: {{bucket_cap: {cap}, first_bucket: {cap}}}
{extra}""")
    return path
