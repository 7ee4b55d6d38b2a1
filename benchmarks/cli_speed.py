"""Wall time of `commsim run` on the example scenarios, start-up included (issue 2, section 8).

Runs each command N times in a fresh process and reports min / median. Usage:

    python benchmarks/cli_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

COMMANDS = [
    ["run", "scenarios/32gpu_throttle.yaml", "-q"],
    ["run", "scenarios/scaling_1024.yaml", "-q"],
    ["run", "scenarios/scaling_1024.yaml", "-q", "--set", "ddp.bucket_cap=25 MB", "--set", "ddp.first_bucket=1 MB",
     "--set", "model.grad_dtype=fp32"],  # 1,024 ranks x 100 steps x 161 buckets
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    exe = shutil.which("commsim") or sys.exit("commsim is not installed (pip install -e .)")
    for cmd in COMMANDS:
        walls = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            subprocess.run([exe, *cmd], check=True)
            walls.append(time.perf_counter() - t)
        print(f"commsim {' '.join(cmd)}: min {min(walls):.3f} s, median {statistics.median(walls):.3f} s over {a.repeat}")


if __name__ == "__main__":
    main()
