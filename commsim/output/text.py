"""The human-readable text the commands print: `commsim run`'s summary and the side-by-side
algorithm table of `commsim collective SCENARIO --algorithm LIST`.

Text never wraps when it does not go to a terminal: rich would otherwise wrap at 80 columns
in a pipe or a file, splitting numbers from their units ("1,060.07" / "ms") and breaking grep.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Dict, Sequence

from commsim.network.costs import ring_traffic_bytes
from commsim.scenario.spec import Scenario
from commsim.units import counted

if TYPE_CHECKING:  # rich is imported when text is printed: `commsim run -q` does without it
    from rich.console import Console


# Width given to a console that is not a terminal: wide enough that no line of ours wraps
# (rich tables do not stretch to it: they take their content's width).
UNWRAPPED_WIDTH = 10_000


@functools.lru_cache(maxsize=None)
def _console_class():
    from rich.console import Console

    class _PipeConsole(Console):
        """A console that lets a closed pipe surface as the BrokenPipeError it is: rich's own
        handler points stdout at /dev/null and exits 1, while the CLI ends a command whose
        reader went away (``| head -1``) quietly with exit 0 (commsim.cli.common.Group)."""

        def on_broken_pipe(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    return _PipeConsole


def text_console(stderr: bool = False) -> "Console":
    """A rich console on stdout (or stderr) that wraps at the terminal's width on a terminal
    and never wraps elsewhere (a pipe, a file)."""
    console = _console_class()(highlight=False, stderr=stderr)
    if not console.is_terminal:
        console.width = UNWRAPPED_WIDTH
    return console


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def print_summary(sc: Scenario, s: Dict[str, Any], console: "Console | None" = None) -> None:
    """Print the summary of one run (the dict of :func:`commsim.analysis.report.summarize`)."""
    from rich.table import Table

    console = console or text_console()
    c = sc.cluster
    console.print(
        f"[bold]{s['scenario']}[/bold]: {counted(s['world_size'], 'GPU')} ({counted(c.nodes, 'node')} x {c.gpus_per_node}), "
        f"{counted(sc.model.parameters, 'parameter', ',')} ({sc.model.grad_dtype}), {counted(s['buckets'], 'bucket')}, "
        f"{counted(s['steps'], 'step')}, seed {s['seed']}"
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


def format_algorithm_table(head: str, names: Sequence[str], rows: Sequence[Dict[str, Any]]) -> str:
    """Several algorithms side by side: per size, each one's time (us) and busbw (GB/s), '*'
    on the fastest all-reduce of the size. `rows` as
    :func:`commsim.analysis.collective_table.algorithm_rows` gives them (sizes outermost, the
    algorithms in `names` order)."""
    lines = [head, "#       size  " + "  ".join(f"{n[:18]:>22s}" for n in names),
             "#        (B)  " + "  ".join(f"{'time us  busbw GB/s':>22s}" for _ in names)]
    for i in range(0, len(rows), len(names)):
        group = rows[i:i + len(names)]
        cells = [f"{r['time_us']:10.1f} {r['busbw_GBps']:9.2f}{'*' if r['fastest'] else ' '}" for r in group]
        lines.append(f"{group[0]['size_bytes']:12d}  " + "  ".join(f"{c:>22s}" for c in cells))
    lines.append("# * fastest all-reduce for the size")
    return "\n".join(lines)
