"""The table ``commsim blame`` prints: the verdict, per rank, and the critical path per step."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from commsim.units import counted

MAX_STEPS_SHOWN = 20


def _t(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1.0:
        return f"{x:.3f} s"
    if abs(x) >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} us"


def format_blame(report: Dict[str, Any], title: str, top: int = 8) -> str:
    """Plain-text report (fixed-width columns, no colour: it goes to logs and tickets)."""
    lines: List[str] = []
    sigma = report.get("noise_sigma_s")
    noise = (f"noise sigma {_t(sigma)}, late above {_t(report['threshold_s'])}" if sigma is not None
             else "late above the straggler-free baseline's spread")
    lines.append(f"{title}: {counted(report['world_size'], 'rank')}, {counted(report['collectives'], 'collective')}, "
                 f"{counted(report['steps'], 'step')}; {noise}")
    lines.append(f"verdict: {report['verdict']}")
    ranks = sorted(report["ranks"], key=lambda r: (-r["waited_on_s"], -r["last_count"], r["rank"]))
    lines.append("")
    lines.append(f"{'rank':>6} {'last':>6} {'share':>7} {'late':>6} {'steps':>6} {'mean late':>11} "
                 f"{'total late':>11} {'others waited':>14}")
    for r in ranks[:top]:
        lines.append(f"{r['rank']:>6} {r['last_count']:>6} {r['last_share'] * 100:>6.1f}% {r['late_count']:>6} "
                     f"{r['steps_named']:>6} {_t(r['mean_lateness_s']):>11} {_t(r['total_lateness_s']):>11} "
                     f"{_t(r['waited_on_s']):>14}")
    if len(ranks) > top:
        lines.append(f"  ... {counted(len(ranks) - top, 'more rank')} (all in --json)")
    steps = report["per_step"]
    if steps:
        lines.append("")
        lines.append("critical path per step: what set its end")
        lines.append(f"{'step':>6} {'time':>10}  {'set by':<14} {'rank':>5} {'collective':>11} {'chain':>6} {'lateness':>10}")
        for st in steps[:MAX_STEPS_SHOWN]:
            who = st["set_by"]
            rank = "-" if st.get("rank") is None else str(st["rank"])
            coll = "-" if st.get("collective") is None else str(st["collective"])
            lines.append(f"{st['step']:>6} {_t(st.get('step_time_s')):>10}  {who:<14} {rank:>5} {coll:>11} "
                         f"{st.get('chain', 0):>6} {_t(st.get('lateness_s')):>10}")
        if len(steps) > MAX_STEPS_SHOWN:
            lines.append(f"  ... {counted(len(steps) - MAX_STEPS_SHOWN, 'more step')} (all in --json)")
    return "\n".join(lines) + "\n"
