"""`commsim collective`: predicted all-reduce tables in nccl-tests' own columns.

Thin wrapper: the rows come from :mod:`commsim.analysis.collective_table`; this module checks
the options, prints the table and writes the JSON. Wire into the main group with
``register(main)``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

import click

from commsim.calibration import LEVELS
from commsim.cli.common import FORCE_HELP, SizeRange, command, fail, load_or_fail, split_choices
from commsim.cli.outputs import check_outputs, echo_to, write_output
from commsim.output.nccl_table import ELEMENT_BYTES, format_nccl_table


def nccl_columns(row: dict) -> dict:
    """A predicted row with the nccl-tests columns all_reduce_perf prints for float sums
    (count, type, redop, root), in the table's column order."""
    out = {"size_bytes": row["size_bytes"], "count": int(row["size_bytes"] // ELEMENT_BYTES), "type": "float",
           "redop": "sum", "root": -1}
    out.update((k, v) for k, v in row.items() if k != "size_bytes")
    return out


def resized(scenario, ranks: int):
    """The scenario on a world of `ranks` GPUs: ranks / gpus_per_node nodes, or one smaller node."""
    from dataclasses import replace

    from commsim.analysis.algorithm_comparison import with_nodes

    from commsim.scenario.loader import MAX_WORLD_SIZE

    if ranks > MAX_WORLD_SIZE:
        fail(f"--ranks: expected a world size up to {MAX_WORLD_SIZE:,}, got {ranks:,}")
    g = scenario.cluster.gpus_per_node
    if ranks % g == 0:
        return with_nodes(scenario, ranks // g)
    if ranks < g:
        one_node = with_nodes(scenario, 1)
        return with_nodes(replace(one_node, cluster=replace(one_node.cluster, gpus_per_node=ranks)), 1)
    fail(f"--ranks: expected a multiple of the scenario's gpus_per_node ({g}) or fewer, got {ranks}")


def algorithm_tables(scenario_path, overrides, algorithm, model, ranks, cal_path, sizes, force=False):
    """Rows and text of `commsim collective SCENARIO --algorithm NAME|LIST|all`.

    One algorithm: the nccl-tests columns. Several: time and busbw side by side, '*' on the
    fastest all-reduce of each size. Rows: size_bytes, algorithm, chosen, time_us,
    algbw_GBps, busbw_GBps, fastest.
    """
    from commsim.analysis.collective_table import algorithm_rows
    from commsim.calibration import extrapolation_note
    from commsim.calibration.file import load_calibration
    from commsim.collectives import ALGORITHMS, algorithms_for
    from commsim.collectives.kernels import COST_MODELS
    from commsim.output.text import format_algorithm_table
    from commsim.sim.links import fitted_fabric, scenario_fabric

    sc = load_or_fail(scenario_path, overrides, None, None, force=force)
    model = model or sc.collective.model
    if model not in COST_MODELS:
        fail(f"--model: expected one of {', '.join(COST_MODELS)}, got {model!r}")
    if algorithm is None:
        names = [sc.collective.algorithm]
    else:
        names = split_choices(algorithm, "--algorithm", algorithms_for(model) if algorithm.strip() == "all" else ALGORITHMS)
    covered = algorithms_for(model)
    beyond = [n for n in names if n not in covered]
    if beyond:
        fail(f"--model {model} covers algorithms {', '.join(covered)}; got {beyond[0]!r}")
    if ranks is not None:
        sc = resized(sc, ranks)
    fabric = scenario_fabric(replace(sc, calibration=None))  # nominal links unless --calibration
    cal = load_calibration(cal_path) if cal_path else None
    links = fitted_fabric(fabric, cal) if cal else fabric  # priced per size range by the fit
    rows = algorithm_rows(names, lambda size: links, sizes, model)
    where = f"{sc.world_size} ranks ({sc.cluster.nodes} nodes x {sc.cluster.gpus_per_node}), model {model}"
    links = f"calibration {cal_path}" if cal else "nominal links"
    head = f"# commsim collective: {scenario_path}, {where}, {links}"
    note = extrapolation_note(cal, sc.world_size, nodes=sc.cluster.nodes) if cal else None
    if note:
        head += f"\n# {note}"
    if len(names) == 1:
        chosen = sorted({r["chosen"] for r in rows})
        table = format_nccl_table([nccl_columns(r) for r in rows])
        return rows, "\n".join([f"{head}, algorithm {names[0]} (runs: {', '.join(chosen)})", table])
    return rows, format_algorithm_table(head, names, rows)


def calibration_table(cal_path: str, ranks: int, sizes, level: Optional[str]):
    """Rows and text of `commsim collective --calibration CAL --ranks N`: the calibration's curve."""
    from commsim.analysis.collective_table import calibration_rows
    from commsim.calibration import extrapolation_note
    from commsim.calibration.file import load_calibration

    cal = load_calibration(cal_path)
    lv = cal.level(level)
    rows = [nccl_columns(r) for r in calibration_rows(cal, ranks, sizes, lv.level)]
    n_table = sum(r["source"] == "table" for r in rows)
    ranges = "; ".join(f">= {r.min_size_bytes} B: alpha {r.alpha_s * 1e6:.3f} us, beta {r.beta_Bps / 1e9:.3f} GB/s"
                       for r in lv.ranges)
    finite = [r["busbw_GBps"] for r in rows if math.isfinite(r["busbw_GBps"])]
    note = extrapolation_note(cal, ranks, level=lv.level)
    lines = [f"# commsim collective: all_reduce, {ranks} ranks, level {lv.level}, calibration {cal_path}",
             *([f"# {note}"] if note else []),
             f"# {n_table} of {len(rows)} sizes from the measured table, the rest from the alpha-beta model ({ranges})",
             format_nccl_table(rows),
             f"# Avg bus bandwidth    : {sum(finite) / len(finite):g}" if finite else "#"]
    return rows, "\n".join(lines)


@command("collective")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False))
@click.option("--calibration", "cal_path", type=click.Path(dir_okay=False),
              help="Calibration YAML (commsim calibrate): its measured curve, or its fitted links under --algorithm.")
@click.option("--ranks", type=click.IntRange(min=2), default=None,
              help="World size of the all-reduce (with SCENARIO: its node count is resized to fit).")
@click.option("--algorithm", default=None,
              help="ring, tree, hierarchical, halving_doubling, reduce_broadcast, auto, reduce_scatter, all_gather, "
                   "a comma-separated list, or all (side by side, fastest marked). Needs SCENARIO (its cluster).")
@click.option("--model", default=None, help="alpha-beta or nccl-2.7/2.19/2.30 (default: the scenario's collective.model).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key, as in `commsim run`.")
@click.option("--sizes", type=SizeRange(), default="8:1G", show_default=True,
              help="MIN:MAX[:FACTOR] in bytes (K/M/G binary), doubling by default.")
@click.option("--level", type=click.Choice(LEVELS), default=None,
              help="Calibration link level to use without SCENARIO (default: the only one, else inter_node).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Also write the rows as JSON ('-': stdout, the table then goes to stderr).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
def collective_cmd(scenario, cal_path, ranks, algorithm, model, overrides, sizes, level, json_path, force):
    """Print predicted all-reduce tables in nccl-tests' own columns.

    \b
    Two ways:
      commsim collective --calibration CAL.yaml --ranks N [--sizes 8:1G]
        the calibration's own curve: its measured table when N is a measured world size and
        the size lies inside it, otherwise its fitted alpha-beta model;
      commsim collective SCENARIO [--algorithm NAME|all] [--model M] [--ranks N] [--calibration CAL]
        the scenario's cluster (and --set) priced by each algorithm's closed form; with a
        calibration, its fitted alpha/beta replace the nominal link numbers.
    """
    from commsim.output.run_files import json_text

    stdout_taken = check_outputs({"--json": json_path})
    if scenario is not None or algorithm is not None or model is not None or overrides:
        if scenario is None:
            fail("--algorithm, --model and --set need a SCENARIO: its cluster is the topology the algorithms run on")
        rows, text = algorithm_tables(scenario, overrides, algorithm, model, ranks, cal_path, sizes, force)
    else:
        if cal_path is None or ranks is None:
            fail("give --calibration CAL.yaml and --ranks N (the calibration's curve), or a SCENARIO (its cluster)")
        rows, text = calibration_table(cal_path, ranks, sizes, level)
    if json_path:
        write_output(json_path, json_text(rows), "the JSON rows")
    echo_to(stdout_taken)(text)


def register(group: click.Group) -> None:
    """Add `collective` to the main CLI group."""
    group.add_command(collective_cmd)
