"""`commsim algorithms`: step time and scaling efficiency of a scenario per all-reduce algorithm.

Registered into the main group by :func:`register` (commsim/cli.py calls it). Also runnable
alone: ``python -m commsim.cli_collectives algorithms SCENARIO ...``.
"""

from __future__ import annotations

import json
import sys

import click

from .collectives import ALL_REDUCE
from .collectives.kernels import COST_MODELS


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
    from .cli import fail, load_or_fail, write_output
    from .algorithms import compare

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
    if json_path:
        doc = {"scenario": sc.name, "rows": rows}
        write_output(json_path, json.dumps(doc, indent=2, sort_keys=True) + "\n", "the JSON rows")
    click.echo(format_rows(rows))


def format_rows(rows) -> str:
    """A fixed-width table of :func:`commsim.algorithms.compare` rows."""
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


if __name__ == "__main__":  # pragma: no cover
    from .cli import main, run_cli

    register(main)
    sys.exit(run_cli())
