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
- one: that residual, held (as beyond the end of a measured range);
- none (the model picks, at the asked size, something no adjacent measured size ran): no
  correction, the physical price alone, and the caller says so.

What this cannot mend, and does not try to: a spike at the asked size itself (nothing that
does not know the answer predicts it), and a switch where NCCL's real pick changes at another
size than the model's (the held residual then comes from the wrong side). A second rule was
tried and rejected: treating a measured residual that disagrees with both of its neighbours
as an isolated spike and not spreading it. With the sizes 4x apart (every other size of a
table), such a residual is as often a bump several sizes wide, seen at one measured size, as
a lone spike; on the cross-scale interpolation benchmark it raised the largest error.
"""

from __future__ import annotations

from typing import Hashable, Sequence, Tuple

import numpy as np


def residual_correction(asked, asked_picks: Sequence[Hashable], sizes, residuals,
                        picks: Sequence[Hashable]) -> Tuple[np.ndarray, np.ndarray]:
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
            corr[j], ok[j] = r[lo if below else hi], True
    return corr, ok
