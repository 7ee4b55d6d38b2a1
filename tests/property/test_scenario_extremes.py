"""Every key the scenario schema accepts, set to extreme values through ``--set``: each case is
either refused (one InputError line at that key, exit 2 from the CLI, no JSON written) or runs and
gives finite, non-negative times.

The keys are not listed by hand: they come from the schema itself (``SECTION_KEYS`` for the
mappings, ``STRAGGLERS`` for each straggler kind), and the keys of scenarios/*.yaml and of the
tables in docs/scenario-format.md are checked to be among them, so that a key added to the schema,
a file or the docs is walked too. Each key is set in a small base scenario (4 ranks, 2 steps) that
holds it in a context where it is read (a bucket layout, concurrent streams, a preset's NIC
arithmetic, one straggler of each kind, sharding, an NCCL cost model), in every base that holds it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from commsim.cli.main import main as cli
from commsim.errors import InputError
from commsim.scenario.loader import load_scenario
from commsim.scenario.schema_fields import SECTION_KEYS
from commsim.scenario.schema_stragglers import STRAGGLERS
from commsim.sim.engine import simulate

ROOT = Path(__file__).resolve().parents[2]

# The extreme values, as written after KEY= (YAML: "1e300" is text, "1.0e+300" a float)
VALUES = ("0", "-1", "1e-300", "1.0e-300", "1e300", "1.0e+300", "nan", ".nan", "inf", ".inf", "-inf",
          "-.inf", "abc", "[1, 2]", "9223372036854775807", "1e6", "1e-6")

_CLUSTER = {
    "nodes": 2, "gpus_per_node": 2,
    "intra_node": {"bandwidth": "100 GB/s", "latency": "3 us"},
    "inter_node": {"bandwidth": "10 GB/s", "latency": "10 us"},
    "intra_kind": "nvswitch", "nics_per_node": 1,
}
_COMMON = {
    "name": "extremes", "description": "extreme values", "seed": 1, "steps": 2,
    "model": {"parameters": 1_000_000, "grad_dtype": "fp32"},
    "compute": {"forward": "1 ms", "backward": "2 ms", "optimizer": "0.5 ms", "batch_size": 8},
    "collective": {"algorithm": "ring", "model": "alpha-beta"},
}
_DDP_COSTS = {"bucket_overhead": "20 us", "memory_bandwidth": "1 TB/s", "gradient_as_bucket_view": False,
              "overlap_slowdown": 0.1}
_STRAGGLERS = [
    {"kind": "slow_rank", "ranks": [1], "factor": 1.5},
    {"kind": "throttle", "ranks": [2], "heat_up": "2 ms", "throttled_time": "1 ms", "clock_fraction": 0.5,
     "phase": "1 ms"},
    {"kind": "jitter", "ranks": "all", "distribution": "lognormal", "cv": 0.05},
    {"kind": "stall", "ranks": [0], "duration": "1 ms", "every": 2},
    {"kind": "stall", "ranks": [3], "duration": "1 ms", "probability": 0.5},
    {"kind": "slow_link", "factor": 0.5, "rank": 1},
    {"kind": "slow_link", "factor": 0.5, "node": 1},
]
# name -> a scenario; a key is walked in the first base that holds it
BASES: Dict[str, Dict[str, Any]] = {
    "plain": {**_COMMON, "cluster": _CLUSTER, "stragglers": _STRAGGLERS,
              "ddp": {"bucket_cap": "1 MB", "first_bucket": "100 kB", "overlap": True, "gradient_accumulation": 2,
                      "sharding": "none", "comm_streams": 1, **_DDP_COSTS}},
    "layout": {**_COMMON, "cluster": _CLUSTER,
               "ddp": {"bucket_sizes": [3_000_000, 999_999, 1], "bucket_ready": [0.5, 0.9, 1.0], **_DDP_COSTS}},
    "streams": {**_COMMON, "cluster": _CLUSTER,
                "ddp": {"bucket_cap": "1 MB", "comm_streams": 2, "comm_capacity": 1.5, "comm_shared": "bandwidth"}},
    "sharded": {**_COMMON, "cluster": _CLUSTER, "stragglers": _STRAGGLERS[:1],
                "ddp": {"bucket_cap": "1 MB", "first_bucket": "100 kB", "sharding": "fsdp", **_DDP_COSTS}},
    "nccl": {**_COMMON, "cluster": {**_CLUSTER, "intra_kind": "pcie", "nics_per_node": 2, "gpu_arch": "ampere"},
             "collective": {"algorithm": "auto", "model": "nccl-2.19"}, "stragglers": _STRAGGLERS[5:],
             "ddp": {"bucket_cap": "1 MB", "first_bucket": "100 kB", **_DDP_COSTS}},
    "physical": {**_COMMON, "cluster": _CLUSTER, "stragglers": _STRAGGLERS[5:],
                 "collective": {"algorithm": "nccl", "model": "alpha-beta", "nccl_algo": "ring,tree",
                                "nccl_proto": "^LL"}},
    "nics": {**_COMMON, "cluster": {"preset": "dgx-a100", "nodes": 2, "gpus_per_node": 2, "nics_per_node": 2,
                                    "nic_bandwidth": "100 Gbps", "oversubscription": 2}},
}


def schema_keys() -> List[str]:
    """Every key path the schema reads: the leaves of SECTION_KEYS's mappings, the straggler
    kinds' keys (at the index of the base's first entry of that kind that holds them) and the
    items of the list-valued keys."""
    sections = set(SECTION_KEYS)
    keys = []
    for section, names in SECTION_KEYS.items():
        for name in names:
            path = f"{section}.{name}" if section else name
            if path in sections or name == "stragglers":
                continue
            keys.append(path)
    keys += ["ddp.bucket_sizes[2]", "ddp.bucket_ready[1]"]
    for kind, (names, *_rest) in STRAGGLERS.items():
        for name in names:
            index = next(i for i, s in enumerate(_STRAGGLERS) if s["kind"] == kind and name in s)
            keys.append(f"stragglers[{index}].{name}")
            if name == "ranks" and isinstance(_STRAGGLERS[index]["ranks"], list):
                keys.append(f"stragglers[{index}].ranks[0]")
    return keys


KEYS = schema_keys()


def _lookup(doc: Any, path: str) -> bool:
    node = doc
    for name, index in re.findall(r"([^.\[\]]+)|\[([0-9]+)\]", path):
        if name:
            if not isinstance(node, dict) or name not in node:
                return False
            node = node[name]
        else:
            if not isinstance(node, list) or int(index) >= len(node):
                return False
            node = node[int(index)]
    return True


# keys no base holds, set into the first: a calibration file's path (every value names no file)
ADDED = ("calibration",)


def base_of(key: str) -> str:
    return next((name for name, doc in BASES.items() if _lookup(doc, key)), next(iter(BASES)))


def bases_of(key: str) -> List[str]:
    """Every base that holds the key (the first, for a key none holds)."""
    return [name for name, doc in BASES.items() if _lookup(doc, key)] or [base_of(key)]


CASES = [(base, key) for key in KEYS for base in bases_of(key)]


def _flatten(node: Any, prefix: str = "") -> List[str]:
    if isinstance(node, dict):
        out = []
        for k, v in node.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            out += _flatten(v, path) if k != "stragglers" else [path]
        return out
    return [prefix]


def test_every_schema_key_is_in_a_base():
    missing = [k for k in KEYS if k not in ADDED and not any(_lookup(doc, k) for doc in BASES.values())]
    assert not missing, f"add these keys to a base scenario: {missing}"


def test_the_scenario_files_and_the_docs_use_no_key_outside_the_schema():
    names = {k.rsplit(".", 1)[-1].split("[")[0] for k in KEYS} | set(SECTION_KEYS[""])
    paths = set(KEYS) | {s for s in SECTION_KEYS if s}
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        doc.pop("mitigation", None)  # read by commsim.mitigations, not the scenario schema
        outside = [k for k in _flatten(doc) if k not in paths and k != "stragglers"]
        assert not outside, f"{path.name}: {outside}"
    documented = set()
    for row in (ROOT / "docs" / "scenario-format.md").read_text(encoding="utf-8").splitlines():
        if row.startswith("| `"):
            first = row.split("|")[1]
            documented |= {name.rsplit(".", 1)[-1] for name in re.findall(r"`([a-z_.]+)`", first)}
    assert documented, "no key tables found in docs/scenario-format.md"
    assert documented - {"kind"} <= names, sorted(documented - names)


@pytest.fixture(scope="module")
def base_files(tmp_path_factory) -> Dict[str, Path]:
    folder = tmp_path_factory.mktemp("extremes")
    files = {}
    for name, doc in BASES.items():
        files[name] = folder / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump(doc, sort_keys=False))
    return files


def _names_the_key(err: InputError, key: str) -> bool:
    """At the key, inside it, (for a list's item) at the list: a layout's sum, a rank twice; or
    at a mapping above it whose message names it, or at another key of a check across keys
    (CrossKeyError.related: the buckets model.parameters makes at a bucket_cap)."""
    path = err.path or ""
    item_of = re.sub(r"\[[0-9]+\]$", "", key)
    if path in (key, item_of) or path.startswith((key + ".", key + "[")) or key in getattr(err, "related", ()):
        return True
    name = re.sub(r"\[[0-9]+\]$", "", key.rsplit(".", 1)[-1])
    return key.startswith(path + ".") and re.search(rf"\b{name}\b", err.message) is not None


# Steps simulated per case: a million steps the reader takes are the run-time budget's to bound
# (commsim.scenario.budget), not this test's to wait for; the first steps hold every extreme
SIMULATED_STEPS = 4


def _check_run(key: str, value: str, scenario) -> None:
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        result = simulate(replace(scenario, steps=min(scenario.steps, SIMULATED_STEPS)))
    for name in ("step_start", "step_end", "rank_end", "rank_backward_end", "rank_comm_end", "rank_busy",
                 "rank_stall", "launch_spread", "comm_time"):
        times = np.asarray(getattr(result, name), dtype=float)
        assert np.all(np.isfinite(times)) and np.all(times >= 0), f"{key}={value}: {name} {times}"
    assert np.all(result.step_time > 0), f"{key}={value}: step times {result.step_time}"


@pytest.mark.parametrize("base, key", CASES, ids=[f"{b}:{k}" for b, k in CASES])
def test_an_extreme_value_is_refused_at_its_key_or_runs_finite(base, key, base_files):
    source = base_files[base]
    for value in VALUES:
        override = f"{key}={value}"
        try:
            scenario = load_scenario(source, overrides=[override])
        except InputError as err:
            message = str(err)
            assert "\n" not in message, message
            assert _names_the_key(err, key), f"{override}: refused at {err.path!r}, not at the key: {message}"
            assert message.startswith(f"{source} (after --set {override!r}): {err.path}: "), message
            assert "expected" in err.message, message
            continue
        _check_run(key, value, scenario)


def _json_numbers(node: Any, where: str = "") -> List[Tuple[str, float]]:
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _json_numbers(v, f"{where}.{k}")]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _json_numbers(v, f"{where}[{i}]")]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return [(where, float(node))]
    return []


# The CLI end to end on a sample: one key of each reader kind (time, rate, size, count, fraction,
# factor, rank, choice, the list items, a preset's NIC arithmetic, a check across keys), every
# value. Not `steps`: a million steps are valid, and the CLI runs them all (twice, the baseline
# too: minutes), as the run-time budget allows
CLI_KEYS = ("compute.forward", "ddp.memory_bandwidth", "ddp.bucket_overhead", "cluster.inter_node.bandwidth",
            "ddp.first_bucket", "model.parameters", "stragglers[3].every", "ddp.overlap_slowdown", "stragglers[0].factor", "stragglers[5].rank",
            "collective.algorithm", "ddp.bucket_sizes[2]", "cluster.oversubscription", "ddp.comm_capacity")


@pytest.mark.parametrize("key", CLI_KEYS)
def test_the_cli_refuses_in_one_line_or_writes_finite_times(key, base_files, tmp_path):
    assert key in KEYS
    source = base_files[base_of(key)]
    for value in VALUES:
        out = tmp_path / "run.json"
        out.unlink(missing_ok=True)
        override = f"{key}={value}"
        result = CliRunner().invoke(cli, ["run", str(source), "-q", "--json", str(out), "--set", override])
        if result.exit_code == 2:
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and key in lines[0] and "Traceback" not in result.stderr, result.stderr
            assert not out.exists(), f"{override}: refused but wrote {out}"
            continue
        assert result.exit_code == 0, f"{override}: exit {result.exit_code}: {result.output} {result.exception!r}"
        numbers = _json_numbers(json.loads(out.read_text()))
        bad = [(w, x) for w, x in numbers if not math.isfinite(x) or x < 0]
        assert numbers and not bad, f"{override}: {bad}"
