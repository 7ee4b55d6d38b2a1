"""Per-log fit figures of README.md, "Calibrating and validating": fit a calibration from each nccl-tests log in
tests/data/nccl-tests and print its busbw errors for sizes >= 1 MiB.

    python benchmarks/calibration_fit_errors.py [LOG ...]

Columns: the calibration's own prediction at the measured sizes (the table: the log itself),
the size-range alpha-beta model, the single alpha-beta line, and the table interpolation with
each size left out in turn (interior sizes only), each as median / max %.
"""

import glob
import os
import sys

import numpy as np

from commsim import calibration as calib
from commsim.calibration.from_logs import calibration_from_nccl_logs

HERE = os.path.dirname(os.path.abspath(__file__))


def figures(path):
    cal, _ = calibration_from_nccl_logs([path])
    link = cal.level()
    n = cal.provenance.world_size
    rows = link.rows_for(n)
    big = [m for m in rows if m.size_bytes >= calib.FIT_ERROR_MIN_SIZE]
    table = [abs(m.time_s / calib.predict_allreduce_time(cal, m.size_bytes, n) - 1) * 100 for m in big]
    loo = []
    for i, m in enumerate(rows):
        if m.size_bytes >= calib.FIT_ERROR_MIN_SIZE and 0 < i < len(rows) - 1:
            bw = calib.interpolate_busbw(rows[:i] + rows[i + 1:], m.size_bytes)
            loo.append(abs(bw / m.busbw - 1) * 100)
    return n, link, table, loo


def main(paths):
    paths = paths or sorted(glob.glob(os.path.join(HERE, "..", "tests", "data", "nccl-tests", "*.txt")))
    print(f"{'log':44s} {'n':>3s} {'table':>11s} {'ranges':>13s} {'line':>13s} {'leave-one-out':>13s}")
    for p in paths:
        n, link, table, loo = figures(p)
        fe, le = link.fit_error, link.line_fit_error
        print(f"{os.path.basename(p)[:44]:44s} {n:3d} {np.median(table):5.1f}/{max(table):4.1f} "
              f"{fe.median_pct:6.1f}/{fe.max_pct:5.1f} {le.median_pct:6.1f}/{le.max_pct:5.1f} "
              f"{np.median(loo):6.1f}/{max(loo):5.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
