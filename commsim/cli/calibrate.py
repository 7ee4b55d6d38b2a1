"""`commsim calibrate`: write a calibration file from nccl-tests logs or by measuring this machine.

Thin wrapper over :func:`commsim.calibration.from_logs.calibration_from_nccl_logs` and
``validate.calibrate.measure_calibration`` (torch, imported inside the command). A problem
with the data names its source: the logs it came from, or the output being calibrated.
Wire into the main group with ``register(main)``.
"""

from __future__ import annotations

from typing import NoReturn, Sequence

import click

from commsim import calibration as calib
from commsim.cli.common import POSITIVE_SECONDS, ByteSize, command, fail, sigterm_interrupts
from commsim.cli.jobs import check_backend, check_sweep_memory, command_line, import_validate, launched_job
from commsim.cli.outputs import check_outputs, echo_to, quiet_echo, write_output
from commsim.cli.validate import host_job, multihost_options
from commsim.errors import InputError
from commsim.paramtypes import iterations
LEVEL_CHOICES = ("auto",) + calib.LEVELS
SWEEP_MIN_SIZE = 8  # the measured sweep starts at 8 B (two floats), as all_reduce_perf -b 8
# Each rank holds a few buffers of the largest size: far beyond any host's memory, a rank is
# killed by the OOM killer mid-sweep (exit 3) instead of the option being refused up front.
SWEEP_MAX_SIZE = 1 << 40


def fit_lines(cal: "calib.Calibration") -> list:
    """What `commsim calibrate` prints about each level's fit."""
    lines = []
    for lv in cal.levels:
        fe = lv.fit_error
        ns = sorted({m.world_size for m in lv.table})
        err = "n/a (no size >= 1 MiB)" if fe.points == 0 else f"median {fe.median_pct:.1f}%, max {fe.max_pct:.1f}%"
        line = "n/a" if lv.line_fit_error.points == 0 else f"median {lv.line_fit_error.median_pct:.1f}%"
        lines.append(
            f"{lv.level}: alpha = {lv.alpha_s * 1e6:.3f} us/step, beta = {lv.beta_Bps / 1e9:.3f} GB/s "
            f"(one line over the sweep; busbw error >= 1 MiB {line}); {len(lv.table)} sizes at n = {','.join(map(str, ns))}"
        )
        for r in lv.ranges:
            lines.append(f"  size range >= {r.min_size_bytes} B: alpha = {r.alpha_s * 1e6:.3f} us, "
                         f"beta = {r.beta_Bps / 1e9:.3f} GB/s")
        lines.append(f"  model (size ranges) busbw error >= 1 MiB: {err}")
    return lines


def _fail_naming(exc: InputError, sources: Sequence[str]) -> NoReturn:
    """Fail with `exc`'s message, prefixed with `sources` unless it already names one of them
    (a fit's "times do not grow with size" names no file by itself)."""
    text = str(exc)
    if any(text.startswith(s) for s in sources):
        fail(text)
    fail(f"{', '.join(sources)}: {text}")


def _from_logs(logs, level, ranks, in_place, same_system=False):
    from commsim.calibration.from_logs import calibration_from_nccl_logs

    if not logs:
        fail("--from-nccl-tests: no nccl-tests log given (expected LOG [LOG ...] before -o)")
    try:
        cal, parsed = calibration_from_nccl_logs(list(logs), level, ranks, in_place, command_line(),
                                                 same_system=same_system)
    except InputError as exc:
        _fail_naming(exc, list(logs))
    notes = []
    for path, log, lv in parsed:
        extra = f", {len(log.notes)} note(s)" if log.notes else ""
        notes.append(f"{path}: {len(log.rows)} rows, n = {log.world_size} (from {log.world_size_from}), level {lv}{extra}")
    return cal, notes


def physical_lines(fit) -> list:
    """What `commsim calibrate --physical` prints: each constant, fitted (with its standard
    error and logs) or nominal (with the reason), and the fit's scatter."""
    lines = [f"physical fit of {fit.nominal.name} (NCCL {fit.nominal.nccl_version}): rms log error "
             f"{fit.rms_log_error:.3f} over {sum(m.sizes.size for m in fit.measurements)} rows"]
    for c in fit.constants.values():
        if c.determined:
            lines.append(f"  {c.name} = {c.value:.4g} +- {c.stderr:.2g} (fit: {len(c.logs)} table(s))")
        else:
            lines.append(f"  {c.name} = {c.value:.4g} (nominal)")
    lines.extend(f"  note: {n}" for n in fit.notes)
    return lines


def _physical(logs, system_name, nodes, gpus_per_node, ranks, level, in_place, same_system):
    """The physical fit of the logs, and the per-level table fit when the logs allow one
    (all_reduce tables only): (calibration, report lines)."""
    from dataclasses import replace

    from commsim.calibration.from_logs import physical_fit_from_nccl_logs, physical_provenance
    from commsim.network.system import preset

    if not logs:
        fail("--from-nccl-tests: no nccl-tests log given (expected LOG [LOG ...] before -o)")
    if system_name is None:
        fail("--physical needs --system PRESET: the nominal hardware the constants start from "
             "(and fall back to where the logs cannot determine them)")
    try:
        system = preset(system_name, "--system")
        fit, read = physical_fit_from_nccl_logs(list(logs), system, nodes=nodes, gpus_per_node=gpus_per_node,
                                                ranks=ranks, same_system=same_system)
    except InputError as exc:
        _fail_naming(exc, list(logs))
    lines = [f"{p.path}: {p.rows} rows ({', '.join(p.kinds)}), {p.nodes} x {p.gpus_per_node} (from {p.scale_from})"
             for p in read]
    try:
        cal, _ = _from_logs_quiet(logs, level, ranks, in_place, same_system)
        cal = replace(cal, physical=fit)
    except InputError as exc:
        cal = calib.Calibration((), physical_provenance(read, command_line()), None, fit)
        lines.append(f"no per-level table fit ({exc}); the file holds the physical fit only")
    return cal, lines + physical_lines(fit)


def _from_logs_quiet(logs, level, ranks, in_place, same_system):
    from commsim.calibration.from_logs import calibration_from_nccl_logs

    return calibration_from_nccl_logs(list(logs), level, ranks, in_place, command_line(), same_system=same_system)


def _measured(output, backend, nprocs, max_size, iters, warmup, compute_params, level, timeout_s, echo, table):
    check_backend(backend, nprocs)
    check_sweep_memory(backend, nprocs, max_size)
    measure = import_validate("calibrate").measure_calibration
    with launched_job(output):
        try:
            return measure(backend=backend, nprocs=nprocs, max_size=max_size, iters=iters, warmup=warmup,
                           compute_params=compute_params, level=None if level == "auto" else level,
                           timeout_s=timeout_s, command=command_line(), echo=echo, table=table)
        except InputError as exc:  # the measured data cannot be fitted: name what was calibrated
            _fail_naming(exc, [f"{output} (measured with {backend}, {nprocs} ranks)"])


def _measured_on_hosts(output, job, tables, backend, max_size, iters, warmup, compute_params, timeout_s, echo):
    """This host's part of a calibration across hosts; the calibration on rank 0's host, else None."""
    check_backend(backend, len(job.local_ranks()), "--nproc-per-node")
    check_sweep_memory(backend, len(job.local_ranks()), max_size)
    measure = import_validate("calibrate").measure_calibration_on_hosts
    stem = output[:-5] if output.endswith(".yaml") else ("calibration" if output == "-" else output)
    with launched_job(output if job.has_rank0 else None):  # only rank 0's host writes next to OUTPUT
        try:
            done = measure(job, backend=backend, max_size=max_size, tables_dir=tables or f"{stem}.tables",
                           iters=iters, warmup=warmup, compute_params=compute_params, timeout_s=timeout_s,
                           command=command_line(), echo=echo)
        except InputError as exc:
            _fail_naming(exc, [f"{output} (measured with {backend}, {job.world_size} ranks on several hosts)"])
    return None if done is None else done[0]


@command("calibrate")
@click.argument("logs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--from-nccl-tests", "from_nccl", is_flag=True,
              help="Fit from nccl-tests all_reduce_perf logs (the LOG arguments) instead of measuring.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Calibration YAML to write ('-': stdout, the report then goes to stderr).")
@click.option("--level", type=click.Choice(LEVEL_CHOICES), default="auto", show_default=True,
              help="Link level of the measurements; auto: one host intra_node, several inter_node "
                   "(host names, else the node count of a '# NRANKS: N (K nodes ...)' header), unknown flat.")
@click.option("--ranks", type=click.IntRange(min=2), default=None,
              help="World size of the logs, when their headers do not say.")
@click.option("--in-place", is_flag=True, help="Use the in-place columns of the logs (default: out-of-place).")
@click.option("--same-system", is_flag=True,
              help="Fit logs whose GPU models or ranks per node differ as one system (refused without it).")
@click.option("--physical", is_flag=True,
              help="Also fit the physical constants of --system (link bandwidths and hop latencies per level, "
                   "protocol ceilings) to every all_reduce/all_gather/reduce_scatter table: predicts other scales.")
@click.option("--system", "system_name", default=None, metavar="PRESET",
              help="Nominal hardware of the logs for --physical (a preset: dgx-h100, dgx-a100, p4d, p5, polaris, ...).")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Node count of logs whose headers do not say (--physical).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=None,
              help="GPUs (ranks) per node of logs whose headers do not say (--physical).")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default=None,
              help="Measure on this machine with torch.distributed (needs the validate extra).")
@click.option("--nprocs", type=click.IntRange(min=2), default=2, show_default=True,
              help="Local processes to launch when measuring.")
@click.option("--max-size", type=ByteSize(minimum=SWEEP_MIN_SIZE, maximum=SWEEP_MAX_SIZE), default="64M", show_default=True,
              help="Largest all-reduce size of the sweep (from 8 B, doubling); K/M/G are binary.")
@click.option("--iters", type=iterations(1), default=10, show_default=True, help="Timed iterations per size.")
@click.option("--warmup", type=iterations(0), default=3, show_default=True, help="Untimed warm-up iterations per size.")
@click.option("--compute-params", type=ByteSize(maximum=SWEEP_MAX_SIZE), default="4M", show_default=True,
              help="Parameters of the synthetic model timed for compute (0 to skip, else >= 2); K/M/G are binary.")
@click.option("--timeout", "timeout_s", type=POSITIVE_SECONDS, default=300.0, show_default=True,
              help="Seconds before a hung or dead rank fails the run (exit 3).")
@multihost_options
@click.option("--tables", type=click.Path(file_okay=False), default=None,
              help="Across hosts: folder (on rank 0's host) for the per-level nccl-tests tables "
                   "(default: OUTPUT without .yaml, plus .tables).")
@click.option("--ddp-fit", "ddp_fit", is_flag=True,
              help="Fit ddp.bucket_overhead (and overlap_slowdown) to `validate --mode ddp --json` reports (the "
                   "arguments) of one job at two or more bucket caps; -o gets a scenario ddp: fragment.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors (-o is still written).")
@click.pass_context
def calibrate_cmd(click_ctx, logs, from_nccl, output, level, ranks, in_place, same_system, physical, system_name,
                  nodes, gpus_per_node, backend, nprocs, max_size, iters, warmup, compute_params, timeout_s,
                  nnodes, node_rank, rdzv_endpoint, nproc_per_node, ranks_from_env, tables, ddp_fit, quiet):
    """Write a calibration file: fit alpha/beta per link level and keep the measured table.

    \b
    From published or local nccl-tests output:
      commsim calibrate --from-nccl-tests LOG [LOG ...] -o CAL.yaml
    Physical constants that predict other scales (commsim collective --nodes/--gpus-per-node):
      commsim calibrate --from-nccl-tests LOG [LOG ...] --physical --system dgx-h100 -o CAL.yaml
    Measuring this machine (launches NPROCS local processes):
      commsim calibrate --backend gloo --nprocs 2 --max-size 16M -o CAL.yaml
    Measuring across hosts (run on each; node 0's host writes CAL.yaml and the per-level tables):
      commsim calibrate --backend nccl --nnodes 2 --node-rank K --rdzv-endpoint NODE0:29500 --nproc-per-node 8 -o CAL.yaml
      srun -N2 --ntasks-per-node 8 commsim calibrate --backend nccl --ranks-from-env --rdzv-endpoint NODE0:29500 -o CAL.yaml
    DDP's own costs, from `validate --mode ddp --json` reports at two or more bucket caps:
      commsim calibrate --ddp-fit ddp_1MB.json ddp_25MB.json -o ddp.yaml
    A rank that dies or hangs exits 3, Ctrl-C exits 130; both keep the measurements taken
    so far in CAL.yaml.partial.json.
    """
    if ddp_fit:
        from commsim.cli.calibrate_ddp import ddp_fit_command
        with sigterm_interrupts():  # in this process: SIGTERM stops it as Ctrl-C does (exit 130)
            return ddp_fit_command(logs, output, from_nccl or backend is not None, quiet)
    if from_nccl == (backend is not None):
        raise click.UsageError("give either --from-nccl-tests LOG [LOG ...] or --backend gloo|nccl")
    # fitting logs runs in this process: SIGTERM stops it as Ctrl-C does (exit 130, the output
    # untouched); a measurement's launcher handles the signals around its ranks itself
    with sigterm_interrupts(from_nccl):
        _calibrate(click_ctx, logs, from_nccl, output, level, ranks, in_place, same_system, physical, system_name,
                   nodes, gpus_per_node, backend, nprocs, max_size, iters, warmup, compute_params, timeout_s,
                   nnodes, node_rank, rdzv_endpoint, nproc_per_node, ranks_from_env, tables, quiet)


def _calibrate(click_ctx, logs, from_nccl, output, level, ranks, in_place, same_system, physical, system_name,
               nodes, gpus_per_node, backend, nprocs, max_size, iters, warmup, compute_params, timeout_s,
               nnodes, node_rank, rdzv_endpoint, nproc_per_node, ranks_from_env, tables, quiet=False) -> None:
    """`commsim calibrate` from its checks on, for --from-nccl-tests or --backend."""
    from commsim.calibration.file import dump_calibration

    if not from_nccl and logs:
        raise click.UsageError("LOG arguments are only read with --from-nccl-tests")
    if compute_params == 1:
        raise click.BadParameter("expected 0 (skip the compute timing) or >= 2 parameters, got 1",
                                 param_hint="--compute-params")
    # before reading or measuring anything; --physical reads the same logs, --backend reads no
    # file (LOG arguments are refused with it)
    stdout_taken = check_outputs({"-o": output}, {"nccl-tests log": list(logs) if from_nccl else None})
    echo = quiet_echo if quiet else echo_to(stdout_taken)
    if not physical and (system_name or nodes or gpus_per_node):
        raise click.UsageError("--system, --nodes and --gpus-per-node go with --physical")
    if physical and not from_nccl:
        raise click.UsageError("--physical fits nccl-tests logs: give --from-nccl-tests LOG [LOG ...]")
    if from_nccl and physical:
        cal, notes = _physical(logs, system_name, nodes, gpus_per_node, ranks, level, in_place, same_system)
    elif from_nccl:
        cal, notes = _from_logs(logs, level, ranks, in_place, same_system)
    else:
        notes = []
        job = host_job(click_ctx, nnodes, node_rank, rdzv_endpoint, nproc_per_node, ranks_from_env)
        if job is None:
            if tables is not None:
                raise click.UsageError("--tables goes with a calibration across hosts (--nnodes N or --ranks-from-env)")
            # rank 0's sweep table goes where the report goes: off stdout when -o - holds the YAML
            table = None if quiet else ("stderr" if stdout_taken else "stdout")
            cal = _measured(output, backend, nprocs, max_size, iters, warmup, compute_params, level, timeout_s, echo,
                            table)
        else:
            if level != "auto":
                raise click.UsageError("--level: across hosts the levels come from the job's placement (keep auto)")
            cal = _measured_on_hosts(output, job, tables, backend, max_size, iters, warmup, compute_params,
                                     timeout_s, echo)
            if cal is None:
                echo(f"{job.describe()}: done; rank 0's host writes {output}")
                return
    write_output(output, dump_calibration(cal), "the calibration")
    for line in notes + fit_lines(cal) + ([] if stdout_taken else [f"wrote {output}"]):
        echo(line)


def register(group: click.Group) -> None:
    """Add `calibrate` to the main CLI group."""
    group.add_command(calibrate_cmd)
