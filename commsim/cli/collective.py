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
from commsim.cli.common import (FORCE_HELP, SizeRange, command, fail, load_or_fail, node_counts, split_choices,
                                split_list)
from commsim.cli.outputs import check_not_named_calibration, check_outputs, echo_to, write_output
from commsim.errors import InputError
from commsim.units import counted
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


def algorithm_tables(scenario_path, overrides, algorithm, model, ranks, cal_path, sizes, force=False, outputs=None):
    """Rows and text of `commsim collective SCENARIO --algorithm NAME|LIST|all`.

    One algorithm: the nccl-tests columns. Several: time and busbw side by side, '*' on the
    fastest all-reduce of each size. Rows: size_bytes, algorithm, chosen, time_us,
    algbw_GBps, busbw_GBps, fastest. `outputs` (option -> path): refused over the calibration
    file the scenario names, once it is read.
    """
    from commsim.analysis.collective_table import algorithm_rows
    from commsim.calibration import extrapolation_note
    from commsim.calibration.file import load_calibration
    from commsim.collectives import ALGORITHMS, algorithms_for
    from commsim.collectives.kernels import COST_MODELS
    from commsim.output.text import format_algorithm_table
    from commsim.scenario.schema import check_cost_model_arch
    from commsim.sim.links import fitted_fabric, scenario_fabric

    sc = load_or_fail(scenario_path, overrides, None, None, force=force)
    check_not_named_calibration(outputs or {}, scenario_path, overrides)
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
    try:
        check_cost_model_arch(f"{scenario_path} (--model {model})", model, sc.cluster.gpu_arch)
    except InputError as exc:
        fail(str(exc))
    if ranks is not None:
        sc = resized(sc, ranks)
    fabric = scenario_fabric(replace(sc, calibration=None))  # nominal links unless --calibration
    cal = load_calibration(cal_path) if cal_path else None
    # a physical fit prices NCCL's own choice (--algorithm nccl) at the scenario's scale; link
    # levels, where the file has them too, price the others
    physical = cal is not None and cal.physical is not None and (names == ["nccl"] or not cal.levels)
    if physical:
        if names != ["nccl"]:
            fail(f"--calibration {cal_path}: a physical fit prices NCCL's own collectives only: expected "
                 f"--algorithm nccl, got {','.join(names)}")
        try:
            from commsim.scenario.schema import check_nccl_selection

            priced = replace(sc, calibration=cal, collective=replace(sc.collective, algorithm="nccl"))
            check_nccl_selection(f"{scenario_path} (--calibration {cal_path})", priced.collective, priced.cluster, cal)
        except InputError as exc:
            fail(str(exc))
        fabric = scenario_fabric(priced)
    elif cal is not None:
        from commsim.calibration import CalibrationError
        from commsim.calibration.records import default_level

        try:  # the links are priced per level: a physical fit alone failed mid-table, naming no file
            default_level(cal)
        except CalibrationError as err:
            raise CalibrationError(err.message, source=str(cal_path)) from None
    links = fitted_fabric(fabric, cal) if cal and not physical else fabric  # priced per size range by the fit
    rows = algorithm_rows(names, lambda size: links, sizes, model)
    where = f"{counted(sc.world_size, 'rank')} ({counted(sc.cluster.nodes, 'node')} x {sc.cluster.gpus_per_node}), model {model}"
    links = f"calibration {cal_path}{' (physical fit)' if physical else ''}" if cal else "nominal links"
    head = f"# commsim collective: {scenario_path}, {where}, {links}"
    if physical:
        note = cal.physical.extrapolation(sc.cluster.nodes, sc.cluster.gpus_per_node)
    else:
        note = extrapolation_note(cal, sc.world_size, nodes=sc.cluster.nodes) if cal else None
    noted = f"\n# {note}" if note else ""
    if len(names) == 1:
        chosen = sorted({r["chosen"] for r in rows})
        table = format_nccl_table([nccl_columns(r) for r in rows])
        # the note on a line of its own, after the header line it qualifies (it was once put
        # between the header and the header's own ", algorithm ..." tail)
        return rows, "\n".join([f"{head}, algorithm {names[0]} (runs: {', '.join(chosen)}){noted}", table])
    return rows, format_algorithm_table(head + noted, names, rows)


def calibration_table(cal_path: str, ranks: int, sizes, level: Optional[str]):
    """Rows and text of `commsim collective --calibration CAL --ranks N`: the calibration's curve."""
    from commsim.analysis.collective_table import calibration_rows
    from commsim.calibration import extrapolation_note
    from commsim.calibration.file import load_calibration

    from commsim.calibration import CalibrationError

    from commsim.scenario.loader import MAX_WORLD_SIZE

    if ranks > MAX_WORLD_SIZE:  # the limit the other modes (and a scenario) have
        fail(f"--ranks: expected a world size up to {MAX_WORLD_SIZE:,}, got {ranks:,}")
    cal = load_calibration(cal_path)
    try:
        lv = cal.level(level)
    except CalibrationError as err:  # the record knows no file: name it (and the option) here
        raise CalibrationError(err.message, source=str(cal_path), key="--level" if level else None) from None
    rows = [nccl_columns(r) for r in calibration_rows(cal, ranks, sizes, lv.level)]
    n_table = sum(r["source"] == "table" for r in rows)
    ranges = "; ".join(f">= {r.min_size_bytes} B: alpha {r.alpha_s * 1e6:.3f} us, beta {r.beta_Bps / 1e9:.3f} GB/s"
                       for r in lv.ranges)
    finite = [r["busbw_GBps"] for r in rows if math.isfinite(r["busbw_GBps"])]
    note = extrapolation_note(cal, ranks, level=lv.level)
    lines = [f"# commsim collective: all_reduce, {counted(ranks, 'rank')}, level {lv.level}, calibration {cal_path}",
             *([f"# {note}"] if note else []),
             f"# {n_table} of {len(rows)} sizes from the measured table, the rest from the alpha-beta model ({ranges})",
             format_nccl_table(rows),
             f"# Avg bus bandwidth    : {sum(finite) / len(finite):g}" if finite else "#"]
    return rows, "\n".join(lines)


def what_if_fields(items) -> dict:
    """The System fields of the --with FIELD=VALUE options, VALUE read as YAML (4, 23.75, true,
    2.27, [{nodes_below: 32, oversubscription: 2}]); a later one for the same field wins."""
    from dataclasses import fields

    from commsim.network.system import System
    from commsim.yamlio import parse_yaml

    # a text field is the text as written: nccl_version=2.20 is release 2.20, not the number 2.2
    text_fields = {f.name for f in fields(System) if f.type in ("str", str)}
    values = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            fail(f"--with {item!r}: expected FIELD=VALUE (e.g. nics_per_node=4)")
        try:
            value = parse_yaml(text, f"--with {item!r}", f" in the value {text.strip()!r}")
        except InputError as exc:
            fail(str(exc))
        if key.strip() in text_fields and not isinstance(value, str):
            value = text.strip()
        values[key.strip()] = value
    return values


def physical_table(cal_path, system_name, counts, gpus_per_node, sizes, kind, nccl_algo, nccl_proto, what_if=()):
    """Rows and text of `commsim collective --nodes N[,N...] --gpus-per-node G` with a
    calibration's physical fit (--calibration) or nominal hardware (--system): the physical
    model's prediction at each node count of `counts`, one table each; `what_if` (--with
    FIELD=VALUE) changes the hardware the prediction is for. Every row says its scale (nodes,
    gpus_per_node) first."""
    from commsim.calibration.file import load_calibration
    from commsim.network.system import preset, with_fields
    from commsim.scenario.loader import MAX_WORLD_SIZE

    fit, system = None, None
    if cal_path:
        cal = load_calibration(cal_path)
        if cal.physical is None:
            fail(f"{cal_path}: physical: the calibration has no physical fit (write one with "
                 "commsim calibrate --from-nccl-tests LOG ... --physical --system PRESET); "
                 "without --nodes/--gpus-per-node, --ranks N gives its measured curve")
        fit = cal.physical
        if system_name and system_name != fit.nominal.name:
            fail(f"--system: the calibration is of {fit.nominal.name!r}, got {system_name!r}")
        system = fit.system
    else:
        system = preset(system_name, "--system")
    values = what_if_fields(what_if)
    if values:
        try:
            if fit is not None:
                fit = fit.what_if(values, "--with")
                system = fit.system
            else:
                system = with_fields(system, values, "--with")
        except InputError as exc:
            fail(f"--with {exc.path}: {exc.message}")
    if gpus_per_node is None:
        gpus_per_node = system.gpus_per_node
    for nodes in counts:  # the loader's limit on a scenario, here too (it ran for minutes)
        if nodes * gpus_per_node > MAX_WORLD_SIZE:
            fail(f"--nodes: expected a world size up to {MAX_WORLD_SIZE:,}, got {nodes * gpus_per_node:,} "
                 f"({nodes:,} nodes x {gpus_per_node})")
    what = f"calibration {cal_path} (physical fit)" if fit else f"nominal {system.name}"
    if values:
        what += " with " + ", ".join(what_if)
    rows, texts = [], []
    for nodes in counts:
        scale_rows, text = _scale_table(fit, system, nodes, gpus_per_node, sizes, kind, nccl_algo, nccl_proto, what)
        rows += scale_rows
        texts.append(text)
    return rows, "\n\n".join(texts)


def _scale_table(fit, system, nodes, gpus_per_node, sizes, kind, nccl_algo, nccl_proto, what):
    """One node count's rows (each led by its nodes and gpus_per_node) and its table."""
    from commsim.calibration.physical_prediction import physical_rows

    try:
        rows, note = physical_rows(kind, nodes, gpus_per_node, sizes, fit=fit, system=system,
                                   algorithm=nccl_algo, protocol=nccl_proto, source="collective")
    except InputError as exc:  # name the option the bad value came from
        option = {"algorithm": "--nccl-algo", "protocol": "--nccl-proto", "nodes": "--nodes",
                  "gpus_per_node": "--gpus-per-node"}.get(exc.path or "", exc.source)
        fail(f"{option}: {exc.message}")
    rows = [{"nodes": nodes, "gpus_per_node": gpus_per_node, **r} for r in rows]
    head = [f"# commsim collective: {kind}, {counted(nodes, 'node')} x {counted(gpus_per_node, 'GPU')}, {what}, NCCL {system.nccl_version}",
            *([f"# {note}"] if note else [])]
    table = format_nccl_table([nccl_columns(r) for r in rows])
    lines = table.split("\n")
    ext = ["   low_us  high_us  algorithm/protocol", "     (us)     (us)", ""]
    out = []
    for i, line in enumerate(lines):
        if i < 3:
            out.append(line + (ext[i] if i < 2 else ""))
            continue
        r = rows[i - 3]
        lo = "      n/a" if r["low_us"] is None else f"{r['low_us']:9.1f}"
        hi = "      n/a" if r["high_us"] is None else f"{r['high_us']:9.1f}"
        out.append(f"{line}{lo}{hi}  {r['chosen']}")
    return rows, "\n".join(head + out)


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
              help="MIN:MAX[:FACTOR] in bytes (K/M/G binary), doubling by default; or one SIZE.")
@click.option("--level", type=click.Choice(LEVELS), default=None,
              help="Calibration link level to use without SCENARIO (default: the only one, else inter_node).")
@click.option("--nodes", "nodes_text", default=None, metavar="N[,N...]",
              help="Predict at this node count (or each of a comma-separated list: 2,16,128) with the physical model "
                   "(a --calibration's physical fit, or --system).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=None,
              help="GPUs per node of the prediction (default: the system's).")
@click.option("--system", "system_name", default=None, metavar="PRESET",
              help="Nominal hardware for --nodes without a calibration (dgx-h100, dgx-a100, p4d, p5, polaris, ...).")
@click.option("--collective", "kind", type=click.Choice(["all_reduce", "all_gather", "reduce_scatter"]),
              default="all_reduce", show_default=True, help="Collective of the physical prediction.")
@click.option("--nccl-algo", default=None,
              help="Restrict NCCL's algorithm like NCCL_ALGO (ring, tree, nvls, nvls_tree, collnet_direct, "
                   "collnet_chain, pat; comma-separated, ^ to exclude).")
@click.option("--nccl-proto", default=None, help="Restrict NCCL's protocol like NCCL_PROTO (LL, LL128, Simple).")
@click.option("--with", "what_if", multiple=True, metavar="FIELD=VALUE",
              help="With --nodes: predict for hardware that differs from the system's or the calibration's by a "
                   "field of its description (nics_per_node=4, nic_bw_GBps=23.75 (achieved GB/s per NIC), "
                   "gpus_per_node=4, nccl_version=2.27, nvls=false, tiers=[{nodes_below: 32, oversubscription: 2}]); "
                   "repeatable.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Also write the rows as JSON ('-': stdout, the table then goes to stderr).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Also write the rows as CSV, the JSON's fields as columns ('-': stdout, the table then goes to "
                   "stderr).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors (--json and --csv are still written).")
def collective_cmd(scenario, cal_path, ranks, algorithm, model, overrides, sizes, level, nodes_text, gpus_per_node,
                   system_name, kind, nccl_algo, nccl_proto, what_if, json_path, csv_path, force, quiet):
    """Print predicted all-reduce tables in nccl-tests' own columns.

    \b
    Three ways:
      commsim collective --calibration CAL.yaml --ranks N [--sizes 8:1G]
        the calibration's own curve: its measured table when N is a measured world size and
        the size lies inside it, otherwise its fitted alpha-beta model;
      commsim collective --calibration CAL.yaml --nodes N[,N...] [--gpus-per-node G] [--collective K]
        the calibration's physical fit at any scale, with a 95% interval (low_us, high_us), NCCL's
        algorithm/protocol per size, and a note when extrapolating; --system PRESET instead of
        --calibration: nominal hardware; --nccl-algo/--nccl-proto restrict the choice;
        --with FIELD=VALUE prices other hardware (nics_per_node=4) than the logs or the preset;
      commsim collective SCENARIO [--algorithm NAME|all] [--model M] [--ranks N] [--calibration CAL]
        the scenario's cluster (and --set) priced by each algorithm's closed form; with a
        calibration, its fitted alpha/beta replace the nominal link numbers.
    """
    from commsim.output.run_files import json_text, rows_csv

    stdout_taken = check_outputs({"--json": json_path, "--csv": csv_path},
                                 {"SCENARIO": scenario, "--calibration file": cal_path})
    physical_opts = [o for o, v in (("--gpus-per-node", gpus_per_node), ("--system", system_name),
                                    ("--nccl-algo", nccl_algo), ("--nccl-proto", nccl_proto),
                                    ("--collective", None if kind == "all_reduce" else kind),
                                    ("--with", what_if)) if v]
    nodes = None if nodes_text is None else node_counts(nodes_text)
    if nodes is None and physical_opts:
        fail(f"{physical_opts[0]} goes with --nodes N (the physical model's prediction at N nodes)")
    if nodes is not None:
        clash = [o for o, v in (("SCENARIO", scenario), ("--ranks", ranks), ("--algorithm", algorithm),
                                ("--model", model), ("--set", overrides), ("--level", level)) if v]
        if clash:
            fail(f"--nodes predicts with the physical model; {clash[0]} belongs to the other modes")
        if not cal_path and not system_name:
            fail("--nodes needs --calibration CAL.yaml (its physical fit) or --system PRESET (nominal hardware)")
        for option, selection in (("--nccl-algo", nccl_algo), ("--nccl-proto", nccl_proto)):
            if selection:  # NCCL_ALGO syntax: an optional ^ (all but these), then a comma list
                split_list(selection, option, negatable=True)
        rows, text = physical_table(cal_path, system_name, nodes, gpus_per_node, sizes, kind, nccl_algo, nccl_proto,
                                    what_if)
    elif scenario is not None or algorithm is not None or model is not None or overrides:
        if scenario is None:
            fail("--algorithm, --model and --set need a SCENARIO: its cluster is the topology the algorithms run on")
        if level is not None:  # it was ignored: the cluster's levels are priced by the calibration's own
            fail("--level goes with --calibration CAL --ranks N (no SCENARIO); on a SCENARIO's cluster each link "
                 "level is priced by the calibration's matching level")
        rows, text = algorithm_tables(scenario, overrides, algorithm, model, ranks, cal_path, sizes, force,
                                      {"--json": json_path, "--csv": csv_path})
    else:
        if cal_path is None or ranks is None:
            fail("give --calibration CAL.yaml and --ranks N (the calibration's curve), or a SCENARIO (its cluster)")
        rows, text = calibration_table(cal_path, ranks, sizes, level)
    if json_path:
        write_output(json_path, json_text(rows), "the JSON rows")
    if csv_path:
        write_output(csv_path, rows_csv(rows), "the CSV rows")
    if not quiet:
        echo_to(stdout_taken)(text)


def register(group: click.Group) -> None:
    """Add `collective` to the main CLI group."""
    group.add_command(collective_cmd)
