"""The measured-residual correction of a physical prediction at a measured scale.

A fit leaves, at every measured size, a residual ``r = log(measured / predicted)``. At a
scale that was measured, :meth:`PhysicalFit.predict` multiplies the physical time by
``exp(c(s))``, where ``c`` carries these residuals to the asked sizes ``s``
(:func:`residual_correction`). The rule uses the measured sizes and the model's own picks
only, never the time at the asked size:

**A residual corrects only its own regime.** Every size runs one (algorithm, protocol), the
model's pick there. A residual measures how wrong the model's price *of that pick* is, and
each (algorithm, protocol) is priced by its own constants, so a residual measured under
another pick says nothing about this one: a tree/LL residual of +1.2 next to a tree/Simple
one of -1.5 (Polaris over TCP sockets, 128 x 4, at 256 KB and 1 MB) are two different
errors, not two ends of one smooth curve, and interpolating between them puts an error of
the one into the other. So an asked size takes the residuals of the measured sizes adjacent
to it (the nearest below and above) only where the model picks, at that measured size, what
it picks at the asked size:

- both adjacent sizes in its regime: linear interpolation in log size (as before);
- one: that residual, held (as beyond the end of a measured range), or, where it and the
  regime's next two measured sizes on that side lie on one line in log size (to within
  :data:`LINE_TOL`), that line carried on to the asked size: a residual that drifts steadily
  with size (a term the physical model gets wrong by a growing factor) keeps drifting over one
  more gap, and a trend three measured sizes long is not a lone bump;
- none (the model picks, at the asked size, something no adjacent measured size ran): no
  correction, the physical price alone, and the caller says so.

A regime is the (algorithm, protocol) and also which of a network step's floors price the
size (:func:`regimes`, :data:`REGIME_CONSTANTS`): the proxy's per-step cost and the
rendezvous messages of a chunk past the plugin's eager limit are a ``max`` over the step's
other costs, so from the size where one starts or stops binding the price has another term,
and a residual measured on one side is the error of a term the other side does not pay.

What this cannot mend, and does not try to: a spike at the asked size itself (nothing that
does not know the answer predicts it), and a switch where NCCL's real pick changes at another
size than the model's (the held residual then comes from the wrong side). A second rule was
tried and rejected: treating a measured residual that disagrees with both of its neighbours
as an isolated spike and not spreading it. With the sizes 4x apart (every other size of a
table), such a residual is as often a bump several sizes wide, seen at one measured size, as
a lone spike; on the cross-scale interpolation benchmark it raised the largest error.
Carrying the trend of the last two residuals across every switch, without asking a third to
lie on their line, raised it too (47.8 -> 57.2%: Polaris 2 x 4 all_reduce under NCCL 2.21 at
2 MB, where ring/LL's two residuals below fall while the measured time doubles). Skipping a
measured residual that stands beyond both of its own regime's neighbours by more than the 15%
band while those two agree to within it (interpolating past it) mends a lone spike (Polaris
2 x 4 all_gather at 32 KB: 16 KB 26.6 -> 2.5%) but shifts the median (2.0 -> 2.25%) and spoils
wide dips (Polaris 8 x 4 all_reduce at 64 MB: 32 MB and 128 MB 0.4 -> 12.6%).
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence, Tuple

import numpy as np


#: How close to one line (in log time) three measured residuals of a regime must lie for their
#: trend to be carried across a switch: half the 15% interpolation band, log(1.15) / 2.
LINE_TOL = 0.5 * math.log(1.15)


def residual_correction(asked, asked_picks: Sequence[Hashable], sizes, residuals,
                        picks: Sequence[Hashable], line_tol: float = LINE_TOL) -> Tuple[np.ndarray, np.ndarray]:
    """The log correction at each asked size, and whether a measured residual supports it.

    `sizes`, `residuals` and `picks` are the measured sizes (any order), their residuals
    ``log(measured / predicted)`` and the model's (algorithm, protocol) at each; `asked_picks`
    is the model's pick at each asked size. An asked size outside the measured range, or in a
    regime neither adjacent measured size ran, gets 0 and False. At a measured size the
    correction is its own residual.
    """
    x_all = np.log(np.atleast_1d(np.asarray(asked, dtype=float)))
    order = np.argsort(np.asarray(sizes, dtype=float), kind="stable")
    s = np.log(np.asarray(sizes, dtype=float)[order])
    r = np.asarray(residuals, dtype=float)[order]
    g = [picks[i] for i in order]
    corr = np.zeros(x_all.shape)
    ok = np.zeros(x_all.shape, dtype=bool)
    if len(asked_picks) != x_all.size:
        raise ValueError(f"{x_all.size} asked sizes but {len(asked_picks)} picks")
    for j, (x, pick) in enumerate(zip(x_all, asked_picks)):
        if not s.size or x < s[0] or x > s[-1]:
            continue
        hi = int(np.searchsorted(s, x, side="left"))
        if s[hi] == x:
            corr[j], ok[j] = r[hi], True
            continue
        lo = hi - 1
        below, above = g[lo] == pick, g[hi] == pick
        if below and above:
            w = (x - s[lo]) / (s[hi] - s[lo])
            corr[j], ok[j] = (1.0 - w) * r[lo] + w * r[hi], True
        elif below or above:
            corr[j], ok[j] = _held(x, s, r, g, lo if below else hi, -1 if below else 1, line_tol), True
    return corr, ok


def _held(x, s, r, g, k, away, tol):
    """The residual at `x`, across a switch from the measured size `k` (the last of its regime
    on that side; `away` = -1 when the regime runs below x, +1 above): the linear trend in log
    size of the regime's residuals at k and its next measured size, where those two and the one
    after lie on one line to within `tol` (a trend three measured sizes long); else r[k], held."""
    k2, k3 = k + away, k + 2 * away
    if not (0 <= k3 < s.size and g[k2] == g[k] and g[k3] == g[k]):
        return r[k]
    on_line = r[k3] + (r[k] - r[k3]) * (s[k2] - s[k3]) / (s[k] - s[k3])
    if abs(r[k2] - on_line) >= tol:
        return r[k]
    return r[k] + (r[k] - r[k2]) / (s[k] - s[k2]) * (x - s[k])


#: Constants of a network step's floors, each a max() over the step's other costs that binds
#: from one size on, as a protocol does: the proxy's per-step cost
#: (:func:`commsim.collectives.nccl.physical.net_step_floor_us`) and the rendezvous messages of a
#: chunk past the plugin's eager limit (:func:`~commsim.collectives.nccl.simple.rendezvous_work_us`).
#: Tried and not kept: every fitted constant (the bandwidth ceilings then split runs of one
#: protocol at each channel count, and the interpolation benchmark's maximum rose 47.8 -> 51.1%).
REGIME_CONSTANTS = ("net_rdzv_us", "net_step_us")


def regimes(picks: Sequence[Hashable], sizes, price, names: Sequence[str] = REGIME_CONSTANTS,
            h: float = 1e-3, tol: float = 1e-6) -> list:
    """Each size's regime: its (algorithm, protocol) and which of the constants `names`
    (:data:`REGIME_CONSTANTS`) its price depends on, fitted or nominal.

    ``price(name, factor, sizes)`` is the physical time with the constant `name` scaled by
    `factor`. A constant prices a size where a relative change of it moves the time
    (|d log t / d log c| > `tol`, central differences with step `h`); it does not where a
    floor or ceiling (a ``max``/``min`` of terms) binds on another term. A residual measures the
    error of the constants that price its size, so one that crosses a change of that set (a
    ring step's rendezvous floor that binds from one size on) carries an error of terms the
    asked size does not pay.
    """
    S = np.atleast_1d(np.asarray(sizes, dtype=float))
    used = np.zeros((S.size, len(names)), dtype=bool)
    for j, name in enumerate(names):
        d = (np.log(price(name, np.exp(h), S)) - np.log(price(name, np.exp(-h), S))) / (2 * h)
        used[:, j] = np.abs(d) > tol
    return [(tuple(pk), frozenset(n for n, u in zip(names, row) if u)) for pk, row in zip(picks, used)]
