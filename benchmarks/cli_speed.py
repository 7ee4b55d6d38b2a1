"""Wall time of `commsim run` on the example scenarios, start-up included (issue 2, section 8).

Runs each command N times (default 5) in a fresh process, as `python -m commsim.cli` from
this checkout, and reports min / median, with the machine's load average (1 min) before and
after each command: on a shared machine a figure means little without it. Usage:

    python benchmarks/cli_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = [
    ["run", "scenarios/32gpu_throttle.yaml", "-q"],
    ["run", "scenarios/scaling_1024.yaml", "-q"],
    ["run", "scenarios/scaling_1024.yaml", "-q", "--set", "ddp.bucket_cap=25 MB", "--set", "ddp.first_bucket=1 MB",
     "--set", "model.grad_dtype=fp32"],  # 1,024 ranks x 100 steps x 161 buckets
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="runs of each command (the median is of these)")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error(f"--repeat: expected a positive count, got {a.repeat}")
    # this checkout's CLI (the `commsim` script on PATH may be another installation's)
    exe = [sys.executable, "-m", "commsim.cli"]
    for cmd in COMMANDS:
        load_before = os.getloadavg()[0]
        walls = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            subprocess.run([*exe, *cmd], check=True, cwd=ROOT)
            walls.append(time.perf_counter() - t)
        print(f"commsim {' '.join(cmd)}: min {min(walls):.3f} s, median {statistics.median(walls):.3f} s over {a.repeat} "
              f"(load average {load_before:.2f} -> {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
