"""The human-readable summary `commsim run` prints."""

from __future__ import annotations

from typing import Any, Dict

from rich.console import Console
from rich.table import Table

from commsim.network.costs import ring_traffic_bytes
from commsim.scenario.spec import Scenario


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def print_summary(sc: Scenario, s: Dict[str, Any], console: Console | None = None) -> None:
    """Print the summary of one run (the dict of :func:`commsim.analysis.report.summarize`)."""
    console = console or Console(highlight=False)
    c = sc.cluster
    console.print(
        f"[bold]{s['scenario']}[/bold]: {s['world_size']} GPUs ({c.nodes} nodes x {c.gpus_per_node}), "
        f"{sc.model.parameters:,} parameters ({sc.model.grad_dtype}), {s['buckets']} buckets, {s['steps']} steps, seed {s['seed']}"
    )
    st = s["step_time_s"]
    t = Table(show_header=True, header_style="bold")
    for col in ("", "mean", "p50", "p95", "p99", "max"):
        t.add_column(col, justify="right")
    t.add_row("step time", *(_ms(st[k]) for k in ("mean", "p50", "p95", "p99", "max")))
    console.print(t)
    b = Table(show_header=False, box=None, pad_edge=False)
    b.add_column(justify="left")
    b.add_column(justify="right")
    b.add_row("compute (healthy rank)", _ms(s["compute_time_s"]))
    b.add_row("exposed communication", _ms(s["exposed_comm_s"]))
    b.add_row("straggler cost", _ms(s["straggler_cost_s"]))
    b.add_row("baseline step (no stragglers)", _ms(s["baseline_step_time_s"]))
    b.add_row("all-reduce time (sum of buckets)", _ms(s["comm_time_s"]))
    b.add_row("slowdown vs baseline", f"{s['slowdown']:.3f}x")
    b.add_row("scaling efficiency", f"{s['scaling_efficiency'] * 100:.1f} %")
    b.add_row("throughput", f"{s['throughput_samples_per_s']:,.1f} samples/s")
    grad = sc.model.grad_bytes
    b.add_row(
        "ring traffic per rank",
        f"{ring_traffic_bytes(grad, sc.world_size) / 1e9:,.3f} GB = 2(n-1)/n x {grad / 1e9:,.3f} GB",
    )
    console.print(b)
    top = s["stragglers_top"]
    if top:
        who = ", ".join(f"rank {e['rank']} ({e['fraction'] * 100:.0f}%)" for e in top)
        console.print(f"late ranks (share of collectives): {who}")
    else:
        console.print("late ranks: none (no rank later than the ring's own skew)")
