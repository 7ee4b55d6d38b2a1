"""`commsim validate`: run a scenario's sync-SGD job for real (torch.distributed) and compare it
with its simulation, or run the numerics checks.

Thin wrapper over validate/ (imported inside the command, so that nothing else of the CLI
imports torch). A rank that dies or hangs exits 3, Ctrl-C exits 130, with the measurements
taken so far kept next to --json. Wire into the main group with ``register(main)``.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Optional

import click
from click.core import ParameterSource

from commsim.cli.common import FORCE_HELP, POSITIVE_SECONDS, command, fail, load_or_fail
from commsim.cli.jobs import check_backend, import_validate, launched_job
from commsim.cli.outputs import check_not_named_calibration, check_outputs, echo_to, quiet_echo, write_output
from commsim.units import counted
from commsim.paramtypes import iterations


def run_numerics(backend: str, nprocs: int, timeout_s: float, json_path: Optional[str],
                 echo: Callable[[str], None]) -> bool:
    """The four numerics checks on `nprocs` ranks; True when all pass."""
    from commsim.output.run_files import json_text

    check_backend(backend, nprocs)  # before torch's import: a refusal costs nothing
    launch_mod = import_validate("launch")
    numerics = import_validate("numerics")
    with launched_job(json_path):
        results = launch_mod.launch(numerics.rank_numerics, nprocs, backend, timeout_s)[0]
    passed = sum(r["passed"] for r in results)
    if json_path:
        write_output(json_path, json_text({"backend": backend, "world_size": nprocs, "checks": results}),
                     "the numerics report")
    for r in results:
        echo(numerics.format_result(r))
    echo(f"{passed} passed, {len(results) - passed} failed")
    return passed == len(results)


def multihost_options(fn):
    """The options of a job across hosts (``calibrate --backend`` and ``validate``)."""
    options = [
        click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Hosts of the job; each runs this command with its own --node-rank (as torchrun)."),
        click.option("--node-rank", type=int, default=None, help="This host's node, 0..NNODES-1 (node 0 writes the output)."),
        click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                     help="Node 0's address and a free port: rank 0 serves the job's c10d TCPStore there "
                          "(a second job of the same command uses PORT+1)."),
        click.option("--nproc-per-node", type=click.IntRange(min=1), default=None,
                     help="Ranks on each host (default 1) with --nnodes."),
        click.option("--ranks-from-env", is_flag=True,
                     help="This process is one rank of a job srun, mpirun or torchrun started: its rank and world "
                          "size come from their variables (SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE, "
                          "PMI_RANK/SIZE, RANK/WORLD_SIZE); rank 0's host writes the output."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def host_job(click_ctx, nnodes: int, node_rank, endpoint, nproc_per_node, ranks_from_env):
    """The validate.multinode.HostJob of the multi-host options, or None for a job on this host
    alone; a bad combination fails in one line (exit 2)."""
    across = nnodes > 1 or ranks_from_env
    if not across:
        given = [name for name, v in (("--node-rank", node_rank), ("--rdzv-endpoint", endpoint),
                                      ("--nproc-per-node", nproc_per_node)) if v is not None]
        if given:
            fail(f"{', '.join(given)}: go with --nnodes N (N >= 2) or --ranks-from-env (a job across hosts)")
        return None
    if click_ctx.get_parameter_source("nprocs") == ParameterSource.COMMANDLINE:
        fail("--nprocs launches ranks on this host alone; across hosts give --nproc-per-node (ranks per host)")
    multinode = import_validate("multinode")
    try:
        if ranks_from_env:
            if nnodes > 1 or node_rank is not None or nproc_per_node is not None:
                fail("--ranks-from-env takes the job's layout from the launcher: drop --nnodes, --node-rank "
                     "and --nproc-per-node")
            return multinode.HostJob.from_environment(endpoint)
        return multinode.HostJob.from_options(nnodes, node_rank, endpoint, nproc_per_node)
    except multinode.JobOptionError as exc:
        fail(str(exc))


# The options of a scenario's run, which --numerics (four fixed checks) would ignore.
_SCENARIO_OPTIONS = (("cal_path", "--calibration"), ("steps", "--steps"), ("warmup_steps", "--warmup-steps"),
                     ("mode", "--mode"), ("overrides", "--set"), ("force", "--force"))


def _refuse_scenario_options(click_ctx) -> None:
    """--numerics with an option that only a scenario's run reads: one line (exit 2), not a
    run that quietly drops it."""
    given = [flag for name, flag in _SCENARIO_OPTIONS
             if click_ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"--numerics runs four fixed checks; {', '.join(given)} "
                               f"{'applies' if len(given) == 1 else 'apply'} to a SCENARIO's run: drop "
                               f"{'it' if len(given) == 1 else 'them'}")


@command("validate")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False))
@click.option("--calibration", "cal_path", type=click.Path(dir_okay=False),
              help="Calibration YAML the prediction uses (from `commsim calibrate`).")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True,
              help="torch.distributed backend of the job (nccl needs a CUDA GPU per rank).")
@click.option("--nprocs", type=click.IntRange(min=1), default=None,
              help="Local ranks to launch (default: the scenario's world size; 2 for --numerics).")
@click.option("--steps", type=iterations(1), default=None, help="Timed steps (overrides the scenario's `steps`).")
@click.option("--warmup-steps", type=iterations(0), default=2, show_default=True, help="Untimed steps first.")
@click.option("--mode", type=click.Choice(["replay", "ddp"]), default="replay", show_default=True,
              help="replay: the scenario's durations and buckets on real all-reduces; "
                   "ddp: a real model under DistributedDataParallel, its measured compute fed to the prediction.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key (as in `run`).")
@click.option("--numerics", is_flag=True, help="Run the four numerics checks instead of a scenario (exit 1 if one fails).")
@click.option("--timeout", "timeout_s", type=POSITIVE_SECONDS, default=120.0, show_default=True,
              help="Seconds without progress before a hung or dead rank fails the run (exit 3).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON ('-': stdout, the text report then goes to stderr).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@multihost_options
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors (--json is still written; --numerics "
                                                  "still exits 1 when a check fails).")
@click.pass_context
def validate_cmd(ctx, scenario, cal_path, backend, nprocs, steps, warmup_steps, mode, overrides, numerics, timeout_s,
                 json_path, force, nnodes, node_rank, rdzv_endpoint, nproc_per_node, ranks_from_env, quiet):
    """Run SCENARIO's sync-SGD job for real and compare it with its simulation.

    \b
    commsim validate SCENARIO --calibration CAL.yaml --backend gloo --nprocs 2 [--steps K] [--json PATH]
    commsim validate --numerics --backend gloo --nprocs 2
    Across hosts (run on each; node 0's host writes --json):
    commsim validate SCENARIO --calibration CAL.yaml --nnodes 2 --node-rank K --rdzv-endpoint NODE0:29500 --nproc-per-node 8
    A rank that dies or hangs exits 3, Ctrl-C exits 130; both keep the measurements taken so
    far in PATH.partial.json when --json PATH is given (else in the folder the message names).
    """
    from commsim.analysis.validation import format_comparison
    from commsim.output.run_files import json_text

    if numerics and scenario:
        raise click.UsageError("--numerics takes no SCENARIO")
    if numerics:
        _refuse_scenario_options(ctx)
    if not numerics and (not scenario or not cal_path):
        raise click.UsageError("give SCENARIO and --calibration CAL.yaml (or --numerics)")
    job = host_job(ctx, nnodes, node_rank, rdzv_endpoint, nproc_per_node, ranks_from_env)
    if job is not None and (numerics or mode != "replay"):
        fail("across hosts validate replays a scenario (--mode replay); --numerics and --mode ddp run on one host")
    stdout_taken = check_outputs({"--json": json_path}, {"SCENARIO": scenario, "--calibration file": cal_path})  # before launching anything
    echo = quiet_echo if quiet else echo_to(stdout_taken)
    if job is not None:
        _validate_on_hosts(scenario, cal_path, overrides, steps, force, backend, job, warmup_steps, timeout_s,
                           json_path, echo)
        return
    if numerics:
        if not run_numerics(backend, nprocs or 2, timeout_s, json_path, echo):
            ctx.exit(1)
        return
    # loaded through the scenario, so that its checks apply (a calibration prices the ring
    # all-reduce under the alpha-beta model: collective.algorithm and .model must say so)
    sc = load_or_fail(scenario, overrides, steps, None, cal_path, force=force)
    # the calibration the scenario file names is kept too, though --calibration replaces it here
    check_not_named_calibration({"--json": json_path}, scenario, overrides)
    n = nprocs or sc.world_size
    if n != sc.world_size:
        fail(f"{scenario}: cluster: the scenario has {sc.world_size} ranks but --nprocs is {n}; "
             f"set cluster.nodes/gpus_per_node with --set to match")
    check_backend(backend, n, "--nprocs" if nprocs else f"{scenario}: cluster (its {n} ranks, one local process each)")
    job = import_validate("replay" if mode == "replay" else "ddp_job")
    with launched_job(json_path), _named_after(scenario, overrides):
        report = job.validate_scenario(sc, sc.calibration, backend, n, warmup_steps, timeout_s, echo)
    report = {"scenario": sc.name, "mode": mode, "backend": backend, "world_size": n, "steps": sc.steps,
              "calibration": cal_path, **report}
    if json_path:
        write_output(json_path, json_text(report), "the validation report")
    echo(report_head(sc.name, n, sc.steps, cal_path))
    echo(format_comparison(report))
    if "stragglers_found_text" in report:  # the replay names what it saw; the DDP job does not
        echo(f"stragglers seen: {report['stragglers_found_text']}")


def _validate_on_hosts(scenario, cal_path, overrides, steps, force, backend, job, warmup_steps, timeout_s,
                       json_path, echo) -> None:
    """This host's part of `commsim validate` across hosts: rank 0's host writes the report."""
    from commsim.analysis.validation import format_comparison
    from commsim.output.run_files import json_text

    sc = load_or_fail(scenario, overrides, steps, None, cal_path, force=force)
    # the calibration the scenario file names is kept too, though --calibration replaces it here
    check_not_named_calibration({"--json": json_path}, scenario, overrides)
    if job.world_size != sc.world_size or (not job.from_env and (job.nnodes, job.nproc_per_node)
                                           != (sc.cluster.nodes, sc.cluster.gpus_per_node)):
        layout = f"{job.world_size} ranks" if job.from_env else f"{job.nnodes} nodes x {job.nproc_per_node} ranks"
        fail(f"{scenario}: cluster: the scenario has {sc.cluster.nodes} nodes x {sc.cluster.gpus_per_node} ranks but "
             f"the job is {layout}; set cluster.nodes/gpus_per_node with --set to match")
    replay = import_validate("replay")
    check_backend(backend, len(job.local_ranks()), "--nproc-per-node")
    with launched_job(json_path if job.has_rank0 else None):  # only rank 0's host writes next to --json
        try:
            with _named_after(scenario, overrides):
                report = replay.validate_scenario_on_hosts(sc, sc.calibration, backend, job, warmup_steps, timeout_s,
                                                           echo)
        except ValueError as exc:  # the scenario cannot be replayed here (CalibrationError included)
            fail(" ".join(str(exc).splitlines()))
    if report is None:
        echo(f"{job.describe()}: done; rank 0's host writes the report")
        return
    report = {"scenario": sc.name, "mode": "replay", "backend": backend, "world_size": sc.world_size,
              "steps": sc.steps, "calibration": cal_path, "nnodes": sc.cluster.nodes, **report}
    if json_path:
        write_output(json_path, json_text(report), "the validation report")
    echo(report_head(sc.name, sc.world_size, sc.steps, cal_path, hosts=sc.cluster.nodes))
    echo(format_comparison(report))
    echo(f"stragglers seen: {report['stragglers_found_text']}")


def report_head(name: str, ranks: int, steps: int, cal_path: str, hosts: Optional[int] = None) -> str:
    """The "# NAME: 2 ranks, 1 step, calibration CAL" line over validate's report (across
    hosts: "8 ranks on 2 hosts")."""
    where = counted(ranks, "rank") + (f" on {counted(hosts, 'host')}" if hosts is not None else "")
    return f"# {name}: {where}, {counted(steps, 'step')}, calibration {cal_path}"


@contextlib.contextmanager
def _named_after(scenario_path: str, overrides=()):
    """Re-raise a job's refusal of the scenario (a CalibrationError naming only a key path, such as
    ``ddp.sharding``) with the scenario file as its source, and the ``--set`` that set the key if one
    did, so the one line names the file, the flag and the key as the loader's own errors do."""
    from commsim.calibration import CalibrationError
    from commsim.scenario.loader import named_source

    try:
        yield
    except CalibrationError as exc:
        if exc.source:
            raise
        raise CalibrationError(exc.message, source=named_source(scenario_path, exc.path, overrides),
                               key=exc.path) from None


def register(group: click.Group) -> None:
    """Add `validate` to the main CLI group."""
    group.add_command(validate_cmd)
