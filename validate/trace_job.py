"""A small real DDP job that leaves what real jobs leave: a profiler trace per rank.

Every rank trains a stack of ``layers`` Linear + ReLU layers, layer i mapping
``width + i * width_step`` features to ``width + (i + 1) * width_step`` (so that DDP's buckets
come in several sizes, as a real model's do), under torch DistributedDataParallel (gloo or
NCCL) with ``bucket_cap_mb`` buckets, and records its
timed steps with ``torch.profiler`` (CPU activity, input shapes on, one ``ProfilerStep#N``
span per step, exactly as ``prof.step()`` in a training loop makes them). The trace is
written per rank as ``rank{r}.trace.json.gz`` (Kineto's Chrome trace format, gzipped by
``export_chrome_trace``), and, where this torch build's process group has a Flight Recorder
(``TORCH_FR_BUFFER_SIZE`` set before the group is created), its dump as ``rank{r}.fr.pkl``
(``torch._C._distributed_c10d._dump_fr_trace``, without stack frames).

Stragglers are injected for real, so that what the trace shows is what a real job shows:

- ``delay_s`` on ``delay_rank``: a sleep in the backward hook of the middle layer, i.e. in the
  middle of that rank's backward (the gradients of the later buckets are produced late there);
- ``slow_factor`` on ``slow_rank``: every layer's forward and backward on that rank take
  ``slow_factor`` times as long (the layer runs, then the rank sleeps (factor - 1) x what it
  took: sleeping, not spinning, so the ranks sharing this machine's cores are not slowed; the
  loss, optimizer and DDP's own work are not stretched);
- ``stall_s`` every ``stall_every`` steps on ``stall_rank``: a pause before the forward.

Each rank also returns the wall-clock (``time.time``, the clock the trace is stamped with)
end of every timed step: the measured step times, taken independently of the trace.

Make traces with ``python -m validate.trace_job OUT_DIR [options]`` (``--help``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

import click

from commsim.atomic import atomic_write_text
from commsim.paramtypes import Seconds, iterations
from validate.entry import CONTEXT, Failure, check_local_ranks, run_command

FR_ENV = "TORCH_FR_BUFFER_SIZE"
SLEEP_MIN_S = 5e-4

DEFAULTS: Dict[str, Any] = {
    "width": 128,
    "width_step": 64,
    "layers": 6,
    "batch_size": 64,
    "bucket_cap_mb": 0.25,
    "steps": 12,
    "warmup_steps": 3,
    "delay_s": 0.0,
    "delay_rank": None,
    "slow_factor": 1.0,
    "slow_rank": None,
    "stall_s": 0.0,
    "stall_every": 0,
    "stall_rank": None,
    "flight_recorder": True,
    "seed": 0,
}


def make_plan(out_dir: str, **options: Any) -> Dict[str, Any]:
    """A plan for :func:`rank_trace_job`: DEFAULTS updated with `options` (unknown keys refused)."""
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown trace job option(s): {', '.join(unknown)}")
    plan = dict(DEFAULTS, **options)
    if plan["steps"] < 1 or plan["layers"] < 2 or plan["width"] < 1 or plan["batch_size"] < 1 \
            or plan["width"] + plan["layers"] * plan["width_step"] < 1:
        raise ValueError("steps >= 1, layers >= 2, width >= 1, batch_size >= 1 and a positive last width are needed")
    if plan["slow_factor"] < 1.0:
        raise ValueError(f"slow_factor must be >= 1 (a sleep cannot speed a rank up), got {plan['slow_factor']}")
    plan["out_dir"] = str(out_dir)
    return plan


def _stretch(modules, factor: float) -> None:
    """Make each module's forward and backward take `factor` times as long: after each, the
    rank owes (factor - 1) x what it took, and sleeps what it owes once that reaches
    SLEEP_MIN_S, counting what it actually slept (a sleep overshoots by tens of microseconds,
    which per-layer sleeps of a small layer would multiply)."""
    started: Dict[int, float] = {}
    owed = [0.0]

    def begin(key):
        def hook(*_):
            started[key] = time.perf_counter()
        return hook

    def end(key):
        def hook(*_):
            owed[0] += (factor - 1.0) * (time.perf_counter() - started.pop(key, time.perf_counter()))
            if owed[0] >= SLEEP_MIN_S:
                t0 = time.perf_counter()
                time.sleep(owed[0])
                owed[0] -= time.perf_counter() - t0
        return hook

    for i, module in enumerate(modules):
        module.register_forward_pre_hook(begin(2 * i))
        module.register_forward_hook(end(2 * i))
        module.register_full_backward_pre_hook(begin(2 * i + 1))
        module.register_full_backward_hook(end(2 * i + 1))


def rank_trace_job(ctx, plan: Dict[str, Any]) -> Dict[str, Any]:
    """validate.launch entry point: warm-up steps, then the profiled steps; writes this rank's
    trace (and Flight Recorder dump) under plan["out_dir"] and returns their paths and the
    wall-clock end of every profiled step."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, schedule

    rank = ctx.rank
    torch.manual_seed(plan["seed"])
    layers: List[nn.Module] = []
    widths = [plan["width"] + i * plan["width_step"] for i in range(plan["layers"] + 1)]
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    module = nn.Sequential(*layers).to(ctx.device)
    linears = [m for m in module if isinstance(m, nn.Linear)]
    # the first layer's input needs no gradient: its full backward hook fires on its outputs'
    # gradients instead, which is what it is for here (torch warns about it)
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    if plan["slow_rank"] == rank and plan["slow_factor"] > 1.0:
        _stretch(linears, plan["slow_factor"])
    if plan["delay_rank"] == rank and plan["delay_s"] > 0:
        middle = linears[len(linears) // 2]

        def delay(*_):  # runs when the middle layer's gradients are computed: mid-backward
            time.sleep(plan["delay_s"])

        middle.register_full_backward_hook(delay)
    model = DDP(module, bucket_cap_mb=plan["bucket_cap_mb"])
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(plan["seed"] + 1 + rank)
    x = torch.randn(plan["batch_size"], widths[0], generator=g).to(ctx.device)
    y = torch.randn(plan["batch_size"], widths[-1], generator=g).to(ctx.device)

    def step(s: Optional[int]) -> None:
        if s is not None and plan["stall_rank"] == rank and plan["stall_every"] and (s + 1) % plan["stall_every"] == 0:
            time.sleep(plan["stall_s"])
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    for _ in range(plan["warmup_steps"]):  # DDP rebuilds its buckets after the first step
        ctx.progress()
        step(None)
    dist.barrier()
    ends: List[float] = []
    # one step of profiler warm-up (Kineto starts there), then every timed step is recorded
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=plan["steps"], repeat=1)) as prof:
        step(None)
        prof.step()
        for s in range(plan["steps"]):
            ctx.progress()
            step(s)
            ends.append(time.time())
            prof.step()
    out = Path(plan["out_dir"])
    trace = out / f"rank{rank}.trace.json.gz"
    prof.export_chrome_trace(str(trace))
    fr_path = None
    if plan["flight_recorder"]:
        dump = _flight_recorder_dump()
        if dump:
            fr_path = out / f"rank{rank}.fr.pkl"
            fr_path.write_bytes(dump)
    ctx.progress()
    dist.barrier()
    return {"rank": rank, "trace": str(trace), "flight_recorder": None if fr_path is None else str(fr_path),
            "step_ends": ends, "torch": torch.__version__}


def _flight_recorder_dump() -> Optional[bytes]:
    """This rank's Flight Recorder dump (a pickle), or None where this build has none."""
    try:
        from torch._C._distributed_c10d import _dump_fr_trace
    except ImportError:
        return None
    try:
        return _dump_fr_trace(includeCollectives=True, includeStackTraces=False)
    except RuntimeError:  # no recorder for this backend
        return None


@contextlib.contextmanager
def _env(name: str, value: Optional[str]):
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def record(out_dir: str, nprocs: int = 2, backend: str = "gloo", timeout_s: float = 120.0,
           **options: Any) -> List[Dict[str, Any]]:
    """Run the job on `nprocs` local ranks; return each rank's result (see rank_trace_job).

    The Flight Recorder is switched on through the environment the ranks inherit (it must be
    set before their process group is created)."""
    from validate.launch import launch

    plan = make_plan(out_dir, **options)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with _env(FR_ENV, "2000" if plan["flight_recorder"] else None):
        return launch(rank_trace_job, nprocs, backend, timeout_s, args=(plan,))


def measured_step_time(results: List[Dict[str, Any]]) -> float:
    """Mean step time of a recorded job from its own clock: the mean over ranks of the mean
    interval between consecutive step ends."""
    import numpy as np

    ends = np.array([r["step_ends"] for r in results])  # (n, steps)
    return float(np.diff(ends, axis=1).mean())


HELP = """A small real DDP job that leaves what real jobs leave: a profiler trace per rank.

\b
  python -m validate.trace_job OUT_DIR --nprocs 2 --steps 16
  python -m validate.trace_job OUT_DIR --steps 10 --delay-s 0.2 --delay-rank 1

Each rank writes OUT_DIR/rank{r}.trace.json.gz (torch.profiler's Chrome trace) and, where the
build has a Flight Recorder, rank{r}.fr.pkl; OUT_DIR/job.json holds the plan and every rank's
measured step ends. Stragglers are real: a sleep mid-backward (--delay-s on --delay-rank), every
layer stretched (--slow-factor on --slow-rank), a pause every --stall-every steps (--stall-s on
--stall-rank). `commsim blame OUT_DIR/*.trace.json.gz` and `commsim import` read the traces.
Exit codes: 0 done, 2 bad input, 3 a rank failed or hung, 130 interrupted.
"""


def _rank_option(name: str, what: str):
    return click.option(name, type=click.IntRange(min=0), default=None, help=f"The rank {what} (default: none).")


@click.command(help=HELP, context_settings=CONTEXT)
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--nprocs", type=click.IntRange(min=1), default=2, show_default=True, help="Local ranks to launch.")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True,
              help="Process-group backend (nccl: one CUDA GPU per rank).")
@click.option("--width", type=click.IntRange(min=1), default=DEFAULTS["width"], show_default=True,
              help="Features into the first layer.")
@click.option("--width-step", type=int, default=DEFAULTS["width_step"], show_default=True,
              help="Features added per layer (so the buckets come in several sizes).")
@click.option("--layers", type=click.IntRange(min=2, max=10_000), default=DEFAULTS["layers"], show_default=True,
              help="Linear + ReLU layers.")
@click.option("--batch-size", type=click.IntRange(min=1), default=DEFAULTS["batch_size"], show_default=True,
              help="Samples per rank and step.")
@click.option("--bucket-cap-mb", type=click.FloatRange(min=0, min_open=True, max=1e6), default=DEFAULTS["bucket_cap_mb"],
              show_default=True, help="DDP's bucket_cap_mb.")
@click.option("--steps", type=iterations(1), default=DEFAULTS["steps"], show_default=True, help="Profiled steps.")
@click.option("--warmup-steps", type=iterations(0), default=DEFAULTS["warmup_steps"], show_default=True,
              help="Unprofiled steps first (DDP rebuilds its buckets after the first).")
@click.option("--delay-s", type=Seconds(minimum=0), default=DEFAULTS["delay_s"], show_default=True,
              help="Seconds slept mid-backward on --delay-rank, every step.")
@_rank_option("--delay-rank", "that sleeps mid-backward")
@click.option("--slow-factor", type=click.FloatRange(min=1, max=1e3), default=DEFAULTS["slow_factor"],
              show_default=True, help="How many times as long --slow-rank's layers take.")
@_rank_option("--slow-rank", "whose layers are stretched")
@click.option("--stall-s", type=Seconds(minimum=0), default=DEFAULTS["stall_s"], show_default=True,
              help="Seconds of pause before the forward on --stall-rank.")
@click.option("--stall-every", type=iterations(0), default=DEFAULTS["stall_every"], show_default=True,
              help="Pause every this many steps (0: never).")
@_rank_option("--stall-rank", "that pauses")
@click.option("--flight-recorder/--no-flight-recorder", default=DEFAULTS["flight_recorder"], show_default=True,
              help="Switch torch's Flight Recorder on for the ranks (where the build has one).")
@click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=DEFAULTS["seed"], show_default=True,
              help="Seed of the weights and the data.")
def command(out_dir, nprocs, backend, **options):
    check_local_ranks(nprocs)
    for key in ("delay_rank", "slow_rank", "stall_rank"):
        if options[key] is not None and options[key] >= nprocs:
            raise Failure(f"--{key.replace('_', '-')} {options[key]}: expected a rank below --nprocs {nprocs}")
    plan = make_plan(out_dir, **options)  # before the launch: a bad plan is bad input, not a failed run
    results = record(out_dir, nprocs, backend, **options)
    summary = {"measured_step_time_s": measured_step_time(results), "plan": plan, "ranks": results}
    atomic_write_text(str(Path(out_dir) / "job.json"), json.dumps(summary, indent=2, sort_keys=True) + "\n")
    click.echo(f"{nprocs} ranks x {plan['steps']} steps: mean step {summary['measured_step_time_s'] * 1e3:.2f} ms; "
               f"traces in {out_dir}")


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m validate.trace_job``: run the command, return its exit code."""
    return run_command(command, argv, prog_name="python -m validate.trace_job")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
