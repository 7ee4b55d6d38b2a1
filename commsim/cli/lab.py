"""``commsim lab``: a multi-node cluster on this machine (network namespaces, shaped links).

::

    commsim lab up --nodes 4 --bandwidth 200Mbit [--latency 0] [--slow-node 2 --slow-bandwidth 100Mbit]
    commsim lab run [--node K | --all-nodes] -- CMD [ARGS...]
    commsim lab link --node K (--bandwidth R | --reset | --cut | --mend)
    commsim lab calibrate -o CAL.yaml [--nodes 2 --ranks-per-node 2]
    commsim lab validate SCENARIO --calibration CAL.yaml
    commsim lab status
    commsim lab down [--all]

Every subcommand takes ``--name`` (default ``lab``): several labs can be up at once. Exit codes:
0 success, 2 bad input (one line), 3 this machine cannot host a lab or ``ip``/``tc`` failed
(one line saying what is missing or what failed); ``run`` returns the command's own code.
Wired into the main group with ``register(main)``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import List

import click

from commsim.cli.common import POSITIVE_SECONDS, fail
from commsim.cli.outputs import check_not_named_calibration, check_outputs, quiet_echo, write_output
from commsim.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED
from commsim.units import counted
from commsim.lab import CommandError, Lab, LabError, LabSpec, LabUnavailable, describe_rate, parse_bits, parse_delay
from commsim.lab.spec import PREFIX
from commsim.lab.testbed import leftovers, signals_raise, teardown
from commsim.paramtypes import iterations

NAME_OPTION = click.option("--name", default="lab", show_default=True,
                           help="Which lab (its namespaces are cslab-NAME-*).")
QUIET_OPTION = click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")


def _echo(quiet: bool):
    """The report stream: click.echo, or nothing with -q (errors still reach stderr)."""
    return quiet_echo if quiet else click.echo


def _guard(fn):
    """One line and an exit code for the lab's errors: 2 for bad input, 3 when the machine
    cannot do it (no root, no tc, a failing ip command)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LabError as exc:
            fail(str(exc))
        except (LabUnavailable, CommandError) as exc:
            fail(str(exc), code=EXIT_RUN_FAILED)

    return wrapper


@click.group("lab")
def lab_group() -> None:
    """A cluster in a box: N nodes (network namespaces) joined by a switch, each node's link
    shaped with tc. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2."""


@lab_group.command("up")
@click.option("--nodes", type=click.IntRange(1, 64), required=True, help="Number of nodes.")
@click.option("--bandwidth", default="200Mbit", show_default=True,
              help="Every node's link rate, each direction (tc's 400Mbit, or 400 Mbit/s).")
@click.option("--latency", default="0", show_default=True,
              help="Added one-way delay per link, e.g. 200us (needs tc's netem qdisc).")
@click.option("--slow-node", type=int, default=None, help="A node whose link runs at --slow-bandwidth.")
@click.option("--slow-bandwidth", default=None, help="That node's link rate (default: half of --bandwidth).")
@NAME_OPTION
@QUIET_OPTION
@_guard
def up_cmd(nodes, bandwidth, latency, slow_node, slow_bandwidth, name, quiet):
    """Build the lab and leave it up (remove it with `commsim lab down`)."""
    rate = parse_bits(bandwidth, "--bandwidth")
    slow = {}
    if slow_bandwidth is not None and slow_node is None:
        raise LabError("--slow-bandwidth", None, "needs --slow-node K (the node whose link is slow)")
    if slow_node is not None:
        slow[slow_node] = parse_bits(slow_bandwidth, "--slow-bandwidth") if slow_bandwidth else rate / 2
    spec = LabSpec(nodes=nodes, rate_bps=rate, delay_s=parse_delay(latency), name=name, slow=slow)
    with signals_raise():
        try:
            Lab(spec).up()  # tears down what it made if interrupted or failing
        except KeyboardInterrupt:
            click.echo("commsim: interrupted; the lab was removed", err=True)
            raise SystemExit(EXIT_INTERRUPTED)
    _echo(quiet)(_describe(spec))


def _describe(spec: LabSpec) -> str:
    lines = [f"lab {spec.name}: {spec.nodes} node{'s' if spec.nodes > 1 else ''}, links "
             f"{describe_rate(spec.rate_bps)} each way, added delay {spec.delay_s * 1e6:g} us"]
    for k in range(spec.nodes):
        note = "  (slow link)" if k in spec.slow else ""
        lines.append(f"  node {k}: {spec.namespace(k)}  {spec.address(k)}  {describe_rate(spec.rate(k))}{note}")
    return "\n".join(lines)


@lab_group.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--node", "nodes", type=int, multiple=True, help="Node to run on (repeatable; default 0).")
@click.option("--all-nodes", is_flag=True, help="Run the command on every node at once.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@NAME_OPTION
@_guard
def run_cmd(nodes, all_nodes, cmd, name):
    """Run CMD inside lab nodes (after --); exits with its exit code (the first non-zero one).

    \b
    Each copy sees COMMSIM_LAB_NODE, COMMSIM_LAB_NODES, COMMSIM_LAB_ADDRESS, MASTER_ADDR (node 0)
    and GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME set, so torchrun runs across the nodes:
      commsim lab run --all-nodes -- sh -c 'torchrun --nnodes $COMMSIM_LAB_NODES \\
        --node-rank $COMMSIM_LAB_NODE --nproc-per-node 1 --master-addr $MASTER_ADDR \\
        --master-port 29500 -m validate.collective_bench --max-size 4194304'
    """
    lab = Lab.attach(name)
    targets = list(range(lab.spec.nodes)) if all_nodes else (list(nodes) or [0])
    for k in targets:
        lab.spec.check_node(k)
    procs: List[subprocess.Popen] = []
    with signals_raise():
        try:
            for k in targets:
                procs.append(subprocess.Popen(lab.command(k, list(cmd)), env=node_env(lab, k)))
            codes = [p.wait() for p in procs]
        except KeyboardInterrupt:
            _stop(procs)
            raise SystemExit(EXIT_INTERRUPTED)
        finally:
            _stop(procs)
    bad = [c for c in codes if c != 0]
    raise SystemExit(bad[0] if bad else 0)


def node_env(lab: Lab, node: int) -> dict:
    """The environment of a command run on `node`: where it is, and where rank 0's node is."""
    env = dict(os.environ)
    env.update(COMMSIM_LAB=lab.spec.name, COMMSIM_LAB_NODE=str(node), COMMSIM_LAB_NODES=str(lab.spec.nodes),
               COMMSIM_LAB_ADDRESS=lab.address(node), MASTER_ADDR=lab.address(0),
               GLOO_SOCKET_IFNAME=lab.interface, NCCL_SOCKET_IFNAME=lab.interface)
    return env


def _stop(procs: List[subprocess.Popen]) -> None:
    """Terminate, then kill, the commands this invocation started (by their pid)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@lab_group.command("link")
@click.option("--node", type=int, required=True, help="The node whose link to change.")
@click.option("--bandwidth", default=None, help="New rate of that node's link (both directions).")
@click.option("--reset", is_flag=True, help="Back to the lab's rate.")
@click.option("--cut", is_flag=True, help="Unplug the node's cable at the switch.")
@click.option("--mend", is_flag=True, help="Plug it back in.")
@NAME_OPTION
@QUIET_OPTION
@_guard
def link_cmd(node, bandwidth, reset, cut, mend, name, quiet):
    """Change one node's link while the lab is up: a slow link, a cut cable."""
    chosen = [flag for flag, on in (("--bandwidth", bandwidth is not None), ("--reset", reset), ("--cut", cut),
                                     ("--mend", mend)) if on]
    if len(chosen) != 1:
        raise LabError("lab link", None, f"give exactly one of --bandwidth, --reset, --cut, --mend (got {len(chosen)})")
    echo = _echo(quiet)
    lab = Lab.attach(name)
    lab.spec.check_node(node)
    if cut:
        lab.cut(node)
        echo(f"node {node}: link cut")
    elif mend:
        lab.mend(node)
        echo(f"node {node}: link mended")
    else:
        lab.set_rate(node, None if reset else parse_bits(bandwidth, "--bandwidth"))
        echo(f"node {node}: {describe_rate(lab.spec.rate(node))}")


@lab_group.command("status")
@NAME_OPTION
@click.option("--quiet", "-q", is_flag=True, help="Print nothing: the exit code alone says whether the lab is up.")
@_guard
def status_cmd(name, quiet):
    """Say whether the lab is up, its nodes, links and what runs in them (exit 1: not up)."""
    from commsim.lab import commands
    from commsim.lab.state import read_spec

    echo = _echo(quiet)
    spec = read_spec(name)
    present = leftovers(f"{PREFIX}{name}-")
    if spec is None:
        if present:
            echo(f"lab {name}: no state file, but namespaces {', '.join(present)} are left "
                 f"(`commsim lab down --name {name}` removes them)")
        else:
            echo(f"lab {name}: not up")
        raise SystemExit(1)
    echo(_describe(spec))
    for ns in spec.namespaces():
        state = f"{len(commands.namespace_pids(ns))} processes" if ns in present else "MISSING"
        echo(f"  {ns}: {state}")
    others = sorted(set(leftovers()) - set(spec.namespaces()))
    if others:
        echo(f"other lab namespaces: {', '.join(others)}")


@lab_group.command("down")
@click.option("--all", "everything", is_flag=True, help="Remove every lab on this machine (all cslab-* namespaces).")
@NAME_OPTION
@QUIET_OPTION
@_guard
def down_cmd(everything, name, quiet):
    """Remove the lab: its processes, namespaces, veths, bridge, qdiscs and state file."""
    from commsim.lab.state import known_labs, remove_state

    if everything:
        removed = teardown(PREFIX)
        for known in known_labs():
            remove_state(known)
    else:
        removed = teardown(f"{PREFIX}{name}-", state_name=name)
    _echo(quiet)(f"removed {', '.join(removed)}" if removed else "nothing to remove")


@lab_group.command("calibrate")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Calibration YAML to write.")
@click.option("--nodes", type=click.IntRange(min=2), default=2, show_default=True, help="Lab nodes to measure on.")
@click.option("--ranks-per-node", type=click.IntRange(min=1), default=2, show_default=True,
              help="gloo ranks per node (2 or more: the intra-node level is measured too).")
@click.option("--min-size", default="4K", show_default=True, help="Smallest all-reduce (doubling up); K/M/G binary.")
@click.option("--max-size", default="4M", show_default=True, help="Largest all-reduce.")
@click.option("--iters", type=iterations(1), default=5, show_default=True, help="Timed iterations per size.")
@click.option("--tables", type=click.Path(file_okay=False), default=None,
              help="Folder for the per-level nccl-tests tables (default: OUTPUT without .yaml, plus .tables).")
@click.option("--timeout", "timeout_s", type=POSITIVE_SECONDS, default=300.0, show_default=True,
              help="Seconds without progress before a hung rank fails the run.")
@NAME_OPTION
@QUIET_OPTION
@_guard
def calibrate_cmd(output, nodes, ranks_per_node, min_size, max_size, iters, tables, timeout_s, name, quiet):
    """Measure the lab per level (2 ranks on node 0, 1 rank on each of nodes 0 and 1, the whole
    job) and write the calibration, as `commsim calibrate --backend gloo` does on one host."""
    from commsim.benchsizes import parse_bench_size
    from commsim.cli.jobs import command_line, import_validate

    echo = _echo(quiet)
    check_outputs({"-o": output})  # before measuring anything, not after
    lab = Lab.attach(name)
    if nodes > lab.spec.nodes:
        raise LabError("--nodes", None, f"lab {name} has {lab.spec.nodes} nodes, asked for {nodes}")
    multinode = import_validate("multinode")
    launch_mod = import_validate("launch")
    folder = tables or (output[:-5] if output.endswith(".yaml") else output) + ".tables"
    options = {"out": os.path.abspath(folder), "calibration": os.path.abspath(output), "command": command_line(),
               "min_size": parse_bench_size(min_size), "max_size": parse_bench_size(max_size), "iters": iters}
    echo(calibrate_head(nodes, ranks_per_node, name, options['min_size'], options['max_size'], iters))
    try:
        with signals_raise():
            done = multinode.launch_on(lab, "validate.collectives_multi:rank_calibrate", nodes, ranks_per_node,
                                       timeout_s=timeout_s, args=(options,))
    except launch_mod.LaunchError as exc:
        fail(f"{exc}", code=EXIT_RUN_FAILED)
    except KeyboardInterrupt:
        raise SystemExit(EXIT_INTERRUPTED)
    doc = done[0]["result"]
    for level, lv in doc.get("levels", {}).items():
        echo(f"{level}: alpha = {lv['alpha_s'] * 1e6:.1f} us/step, beta = {lv['beta_Bps'] * 8 / 1e6:.1f} Mbit/s")
    echo(f"tables in {folder}")
    echo(f"wrote {output}")


def calibrate_head(nodes: int, ranks_per_node: int, name: str, min_size: int, max_size: int, iters: int) -> str:
    """The "# commsim lab calibrate: 2 nodes x 1 rank of lab NAME, ..." line before the measurement."""
    return (f"# commsim lab calibrate: {counted(nodes, 'node')} x {counted(ranks_per_node, 'rank')} of lab {name}, "
            f"all_reduce {min_size}..{max_size} B, {counted(iters, 'iteration')}")


def validate_head(sc, cal_path: str) -> str:
    """The "# NAME: 2 lab nodes x 1, 1 step, calibration CAL" line over `lab validate`'s report."""
    return (f"# {sc.name}: {counted(sc.cluster.nodes, 'lab node')} x {sc.cluster.gpus_per_node}, "
            f"{counted(sc.steps, 'step')}, calibration {cal_path}")


@lab_group.command("validate")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--calibration", "cal_path", required=True, type=click.Path(dir_okay=False),
              help="Calibration YAML the prediction uses (e.g. from `commsim lab calibrate`).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key (as in `run`).")
@click.option("--steps", type=iterations(1), default=None, help="Timed steps (overrides the scenario's).")
@click.option("--warmup-steps", type=iterations(0), default=1, show_default=True,
              help="Untimed steps first.")
@click.option("--timeout", "timeout_s", type=POSITIVE_SECONDS, default=120.0, show_default=True,
              help="Seconds without progress before a hung or dead rank fails the run.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report as JSON.")
@NAME_OPTION
@QUIET_OPTION
@_guard
def validate_cmd(scenario, cal_path, overrides, steps, warmup_steps, timeout_s, json_path, name, quiet):
    """Replay SCENARIO on the lab's nodes (gpus_per_node gloo ranks each), every straggler kind
    injected for real (slow_link: the node's link shaped), compare with its simulation and name
    the stragglers the measurements show."""
    import json

    from commsim.analysis.validation import format_comparison
    from commsim.cli.common import load_or_fail
    from commsim.cli.validate import import_validate

    echo = _echo(quiet)
    # before the replay, not after it: a missing folder, or the scenario itself
    check_outputs({"--json": json_path}, {"SCENARIO": scenario, "--calibration file": cal_path})
    sc = load_or_fail(scenario, overrides, steps, None, cal_path)
    # the calibration the scenario file names is kept too, though --calibration replaces it here
    check_not_named_calibration({"--json": json_path}, scenario, overrides)
    lab = Lab.attach(name)
    job = import_validate("lab_validation")
    launch_mod = import_validate("launch")
    try:
        with signals_raise():
            report = job.validate_in_lab(lab, sc, warmup_steps, timeout_s, echo=echo)
    except launch_mod.LaunchError as exc:
        fail(str(exc), code=EXIT_RUN_FAILED)
    except KeyboardInterrupt:
        raise SystemExit(EXIT_INTERRUPTED)
    except ValueError as exc:  # the scenario cannot be replayed here (CalibrationError included)
        fail(" ".join(str(exc).splitlines()))
    report = {"scenario": sc.name, "lab": lab.spec.to_json(), "world_size": sc.world_size, "steps": sc.steps,
              "calibration": cal_path, **report}
    echo(validate_head(sc, cal_path))
    echo(format_comparison(report))
    echo(f"stragglers seen: {report['stragglers_found_text']}")
    if json_path:
        write_output(json_path, json.dumps(report, indent=2, default=float) + "\n", "the report")


def register(group: click.Group) -> None:
    """Add `commsim lab` to the main command group."""
    group.add_command(lab_group)

