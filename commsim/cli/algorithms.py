"""`commsim algorithms` (step time and scaling efficiency of a scenario per all-reduce
algorithm) and the algorithm tables of `commsim collective SCENARIO --algorithm ...`.

Registered into the main group by :func:`register` (commsim/cli/main.py calls it). Also runnable
alone: ``python -m commsim.cli.algorithms algorithms SCENARIO ...``.
"""

from __future__ import annotations

import json

import click

from commsim.collectives import ALL_REDUCE
from commsim.collectives.kernels import COST_MODELS


def _split(text: str, what: str, choices) -> list:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if items == ["all"]:
        return list(choices)
    bad = [t for t in items if t not in choices]
    if bad or not items:
        raise click.BadParameter(f"expected a comma-separated list of {', '.join(choices)} or 'all', got {text!r}",
                                 param_hint=what)
    return items


def _node_counts(text: str) -> list:
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        counts = []
    if not counts or any(c < 1 for c in counts):
        raise click.BadParameter(f"expected comma-separated positive node counts like 4,32,256, got {text!r}",
                                 param_hint="--nodes")
    return counts


def _resized(scenario, ranks: int):
    """The scenario on a world of `ranks` GPUs: ranks / gpus_per_node nodes, or one smaller node."""
    from dataclasses import replace

    from commsim.analysis.algorithm_comparison import with_nodes

    g = scenario.cluster.gpus_per_node
    if ranks % g == 0:
        return with_nodes(scenario, ranks // g)
    if ranks < g:
        one_node = with_nodes(scenario, 1)
        return with_nodes(replace(one_node, cluster=replace(one_node.cluster, gpus_per_node=ranks)), 1)
    raise ValueError(f"--ranks: expected a multiple of the scenario's gpus_per_node ({g}) or fewer, got {ranks}")


def algorithm_tables(scenario_path, overrides, algorithm, model, ranks, cal_path, sizes):
    """Rows and text of `commsim collective SCENARIO --algorithm NAME|LIST|all`.

    One algorithm: the nccl-tests columns. Several: time and busbw side by side, '*' on the
    fastest all-reduce of each size. Rows: size_bytes, algorithm, chosen, time_us,
    algbw_GBps, busbw_GBps, fastest.
    """
    from dataclasses import replace

    from commsim.sim.links import fitted_fabric, scenario_fabric
    from commsim.calibration.file import load_calibration
    from commsim.cli.common import load_or_fail
    from commsim.output.nccl_table import ELEMENT_BYTES, format_nccl_table
    from commsim.collectives import ALGORITHMS, algorithms_for, table

    sc = load_or_fail(scenario_path, overrides, None, None)
    model = model or sc.collective.model
    if model not in COST_MODELS:
        raise ValueError(f"--model: expected one of {', '.join(COST_MODELS)}, got {model!r}")
    if algorithm is None:
        names = [sc.collective.algorithm]
    else:
        names = _split(algorithm, "--algorithm", algorithms_for(model) if algorithm.strip() == "all" else ALGORITHMS)
    if ranks is not None:
        sc = _resized(sc, ranks)
    fabric = scenario_fabric(replace(sc, calibration=None))  # nominal links unless --calibration
    cal = load_calibration(cal_path) if cal_path else None
    raw = table(names, fitted_fabric(fabric, cal) if cal else fabric, sizes, model)
    rows = [{"size_bytes": r["size"], "algorithm": r["algorithm"], "chosen": r["chosen"], "time_us": r["time_s"] * 1e6,
             "algbw_GBps": r["algbw"] / 1e9, "busbw_GBps": r["busbw"] / 1e9, "fastest": bool(r["fastest"])} for r in raw]
    where = f"{sc.world_size} ranks ({sc.cluster.nodes} nodes x {sc.cluster.gpus_per_node}), model {model}"
    links = f"calibration {cal_path}" if cal else "nominal links"
    head = f"# commsim collective: {scenario_path}, {where}, {links}"
    if len(names) == 1:
        nccl_rows = [dict(r, count=r["size_bytes"] // ELEMENT_BYTES, type="float", redop="sum", root=-1) for r in rows]
        chosen = sorted({r["chosen"] for r in rows})
        return rows, "\n".join([f"{head}, algorithm {names[0]} (runs: {', '.join(chosen)})", format_nccl_table(nccl_rows)])
    lines = [head, "#       size  " + "  ".join(f"{n[:18]:>22s}" for n in names),
             "#        (B)  " + "  ".join(f"{'time us  busbw GB/s':>22s}" for _ in names)]
    for i in range(0, len(rows), len(names)):
        group = rows[i:i + len(names)]
        cells = [f"{r['time_us']:10.1f} {r['busbw_GBps']:9.2f}{'*' if r['fastest'] else ' '}" for r in group]
        lines.append(f"{group[0]['size_bytes']:12d}  " + "  ".join(f"{c:>22s}" for c in cells))
    lines.append("# * fastest all-reduce for the size")
    return rows, "\n".join(lines)


@click.command("algorithms")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--nodes", "nodes_text", help="Comma-separated node counts to compare (default: the scenario's).")
@click.option("--algorithm", "algorithm_text", default="ring,tree,hierarchical", show_default=True,
              help=f"Comma-separated all-reduce algorithms ({', '.join(ALL_REDUCE)}) or 'all'.")
@click.option("--model", "model_text", default="alpha-beta", show_default=True,
              help=f"Comma-separated cost models ({', '.join(COST_MODELS)}) or 'all'.")
@click.option("--steps", type=int, help="Steps per run (overrides the scenario's `steps`).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key (as in run).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the rows as JSON here.")
def algorithms(scenario, nodes_text, algorithm_text, model_text, steps, overrides, json_path):
    """Simulate SCENARIO with each all-reduce algorithm (and cost model) at each node count.

    \b
    Prints per node count and algorithm: GPUs, step time, collective time per step
    (one baseline step's collectives), exposed communication and scaling efficiency
    (compute / step time); '*' marks the fastest.
    Algorithms a model does not cover (NCCL's models: ring, tree, auto) are skipped.
    """
    from commsim.cli.common import fail, load_or_fail, write_output
    from commsim.analysis.algorithm_comparison import compare

    if steps is not None and steps <= 0:
        raise click.BadParameter(f"expected a positive integer, got {steps}", param_hint="--steps")
    names = _split(algorithm_text, "--algorithm", ALL_REDUCE)
    models = _split(model_text, "--model", COST_MODELS)
    sc = load_or_fail(scenario, overrides, steps, None)
    counts = _node_counts(nodes_text) if nodes_text else [sc.cluster.nodes]
    try:
        rows = compare(sc, counts, names, models)
    except ValueError as exc:
        fail(str(exc))
    if not rows:
        from commsim.collectives import algorithms_for

        covered = "; ".join(f"{m} covers {', '.join(algorithms_for(m))}" for m in models)
        fail(f"no (algorithm, model) pair to run among --algorithm {algorithm_text} and --model {model_text}: {covered}")
    if json_path:
        doc = {"scenario": sc.name, "rows": rows}
        write_output(json_path, json.dumps(doc, indent=2, sort_keys=True) + "\n", "the JSON rows")
    click.echo(format_rows(rows))


def format_rows(rows) -> str:
    """A fixed-width table of :func:`commsim.analysis.algorithm_comparison.compare` rows."""
    head = f"{'GPUs':>6}  {'algorithm':<17} {'model':<10} {'step ms':>10} {'comm ms':>10} {'exposed ms':>11} {'efficiency':>10}"
    lines = [head]
    for r in rows:
        mark = " *" if r["fastest"] else ""
        lines.append(f"{r['world_size']:>6}  {r['algorithm']:<17} {r['model']:<10} {r['step_time_s'] * 1e3:>10.2f} "
                     f"{r['comm_time_s'] * 1e3:>10.2f} {r['exposed_comm_s'] * 1e3:>11.2f} "
                     f"{r['scaling_efficiency']:>10.3f}{mark}")
    return "\n".join(lines)


def register(group: click.Group) -> None:
    """Add `algorithms` to the main command group."""
    group.add_command(algorithms)

