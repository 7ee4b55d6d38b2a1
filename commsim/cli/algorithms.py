"""`commsim algorithms`: step time and scaling efficiency of a scenario per all-reduce
algorithm, cost model and node count.

Registered into the main group by :func:`register` (commsim/cli/main.py calls it).
"""

from __future__ import annotations

import json

import click

from commsim.analysis.algorithm_comparison import NCCL_PREFIX, registry_name, with_algorithm, with_nodes
from commsim.cli.common import (FORCE_HELP, POSITIVE_INT, check_resized, command, fail, load_or_fail, node_counts,
                                split_choices)
from commsim.cli.outputs import check_not_named_calibration, check_outputs, echo_to, write_output
from commsim.collectives import ALL_REDUCE
from commsim.collectives.kernels import COST_MODELS, PHYSICAL
from commsim.errors import InputError
from commsim.scenario.schema import check_comm_streams, check_cost_model_arch




def check_calibrated_pairs(scenario, pairs) -> None:
    """A calibration's link levels price the measured ring under the alpha-beta model, its
    physical fit NCCL's own collectives (nccl, nccl:ALGO): refuse any other (algorithm, model)
    pair for a calibrated scenario before running anything."""
    for a, m in pairs:
        try:
            with_algorithm(scenario, a, m)
        except ValueError as exc:
            fail(str(exc))


def algorithm_names() -> tuple:
    """What --algorithm takes: the all-reduce algorithms, nccl, and nccl:ALGO for each of NCCL's."""
    from commsim.collectives.nccl.scale import ALGORITHMS as NCCL_ALGORITHMS

    return ALL_REDUCE + PHYSICAL + tuple(NCCL_PREFIX + a for a in NCCL_ALGORITHMS)


def default_algorithms(scenario, everything: bool = False) -> list:
    """--algorithm left out: ring, tree and hierarchical (`everything`, --algorithm all: every
    all-reduce algorithm and nccl). For a calibrated scenario, what its calibration prices: the
    ring where it has link levels, NCCL's choice and each of NCCL's algorithms alone where it
    has a physical fit."""
    cal = scenario.calibration
    if cal is None:
        return list(ALL_REDUCE + PHYSICAL) if everything else list(DEFAULT_ALGORITHMS)
    return (["ring"] if cal.levels else []) + \
        ([a for a in algorithm_names() if a == "nccl" or a.startswith(NCCL_PREFIX)] if cal.physical is not None else [])


DEFAULT_ALGORITHMS = ("ring", "tree", "hierarchical")


@command("algorithms")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--nodes", "nodes_text", help="Comma-separated node counts to compare (default: the scenario's).")
@click.option("--algorithm", "algorithm_text", default=None,
              help=f"Comma-separated all-reduce algorithms ({', '.join(ALL_REDUCE + PHYSICAL)}; nccl: NCCL's "
                   "own choice priced by the physical model; nccl:ALGO: that choice held to one of NCCL's "
                   "algorithms, as NCCL_ALGO=ALGO: nccl:ring, nccl:tree, nccl:nvls, ...) or 'all' (those and nccl). Default: "
                   f"{','.join(DEFAULT_ALGORITHMS)}; under a calibration, what it prices: ring for its link "
                   "levels, nccl and every nccl:ALGO that can run at the scale for its physical fit.")
@click.option("--model", "model_text", default="alpha-beta", show_default=True,
              help=f"Comma-separated cost models ({', '.join(COST_MODELS)}) or 'all'.")
@click.option("--steps", type=POSITIVE_INT, help="Steps per run (overrides the scenario's `steps`).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key (as in run).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the rows as JSON here ('-': stdout).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the rows as CSV here, nested fields as dotted columns ('-': stdout).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors (--json and --csv are still written).")
def algorithms(scenario, nodes_text, algorithm_text, model_text, steps, overrides, json_path, csv_path, force, quiet):
    """Simulate SCENARIO with each all-reduce algorithm (and cost model) at each node count.

    \b
    Prints per node count and algorithm: GPUs, step time, collective time per step
    (one baseline step's collectives), exposed communication and scaling efficiency
    (compute / step time); '*' marks the fastest.
    Algorithms a model does not cover (NCCL's models: ring, tree, auto) are skipped, and so
    are NCCL's models on GPUs they have no tables for (cluster.gpu_arch blackwell) and any
    nccl:ALGO that NCCL cannot run at that node count (nvls across nodes without SHARP).
    Under a calibration with a physical fit (`calibrate --physical`), nccl and nccl:ALGO
    are priced by its calibrated constants.
    """
    from commsim.analysis.algorithm_comparison import compare
    from commsim.collectives import algorithms_for

    stdout_taken = check_outputs({"--json": json_path, "--csv": csv_path}, {"SCENARIO": scenario})
    everything = algorithm_text is not None and algorithm_text.strip() == "all"
    names = split_choices(algorithm_text, "--algorithm", algorithm_names()) if algorithm_text and not everything else None
    models = split_choices(model_text, "--model", COST_MODELS)
    counts = node_counts(nodes_text) if nodes_text else None
    sc = load_or_fail(scenario, overrides, steps, None, force=force)
    names = names or default_algorithms(sc, everything)
    algorithm_text = algorithm_text or ",".join(names)
    check_not_named_calibration({"--json": json_path, "--csv": csv_path}, scenario, overrides)  # known once the scenario is read
    priced = []
    for m in models:
        try:
            check_cost_model_arch(f"{scenario} (--model {m})", m, sc.cluster.gpu_arch)
            priced.append(m)
        except InputError as exc:
            refused = str(exc)
    if not priced:
        fail(refused)
    models = priced
    pairs = [(a, m) for m in models for a in names if registry_name(a) in algorithms_for(m)]
    if not pairs:
        covered = "; ".join(f"{m} covers {', '.join(algorithms_for(m))}" for m in models)
        fail(f"no (algorithm, model) pair to run among --algorithm {algorithm_text} and --model {model_text}: {covered}")
    check_calibrated_pairs(sc, pairs)
    for count in counts or []:
        check_resized(with_nodes(sc, count), f"--nodes {count}", force)
    for count in counts or [sc.cluster.nodes]:  # ddp.comm_streams > 1 as the loader refuses it, at each run
        for a, m in pairs:
            try:
                check_comm_streams(f"{scenario} (--nodes {count}, --model {m})",
                                   with_algorithm(with_nodes(sc, count), a, m))
            except InputError as exc:
                fail(str(exc))
    scales = counts or [sc.cluster.nodes]
    rows = compare(sc, scales, names, models)
    if not rows:  # every pair asked for was an nccl:ALGO that NCCL cannot run at these node counts
        from commsim.scenario.schema import check_nccl_selection

        a, m = pairs[0]
        try:
            check_nccl_selection(scenario, with_algorithm(sc, a, m).collective, with_nodes(sc, scales[0]).cluster,
                                 sc.calibration, sc.ddp.sharding)
        except InputError as exc:
            fail(f"--algorithm {algorithm_text}: nothing NCCL can run: {exc.message}")
        fail(f"--algorithm {algorithm_text}: nothing to run at these node counts")
    if json_path:
        doc = {"scenario": sc.name, "rows": rows}
        write_output(json_path, json.dumps(doc, indent=2, sort_keys=True) + "\n", "the JSON rows")
    if csv_path:
        from commsim.output.run_files import rows_csv

        write_output(csv_path, rows_csv(rows), "the CSV rows")
    if not quiet:
        echo_to(stdout_taken)(format_rows(rows))


def format_rows(rows) -> str:
    """A fixed-width table of :func:`commsim.analysis.algorithm_comparison.compare` rows."""
    w = max([17] + [len(r["algorithm"]) for r in rows])  # nccl:collnet_direct is 19
    head = f"{'GPUs':>6}  {'algorithm':<{w}} {'model':<10} {'step ms':>10} {'comm ms':>10} {'exposed ms':>11} {'efficiency':>10}"
    lines = [head]
    for r in rows:
        mark = " *" if r["fastest"] else ""
        lines.append(f"{r['world_size']:>6}  {r['algorithm']:<{w}} {r['model']:<10} {r['step_time_s'] * 1e3:>10.2f} "
                     f"{r['comm_time_s'] * 1e3:>10.2f} {r['exposed_comm_s'] * 1e3:>11.2f} "
                     f"{r['scaling_efficiency']:>10.3f}{mark}")
    return "\n".join(lines)


def register(group: click.Group) -> None:
    """Add `algorithms` to the main command group."""
    group.add_command(algorithms)
