"""Print the 256- and 1,024-GPU rows of a sweep's results.csv (README.md, "Capacity planning").

Usage: python docs/capacity/table.py out/capacity/network [GPU_COUNT ...]
"""

import csv
import json
import sys
from pathlib import Path


def main(argv):
    out = Path(argv[0])
    counts = set(argv[1:]) or {"256", "1024"}
    keys = list(json.loads((out / "results.json").read_text())["grid"])
    print(" | ".join(keys + ["GPUs", "buckets", "scaling_efficiency", "step_time_s.mean", "comm_time_s", "slowdown"]))
    with open(out / "results.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            if r["world_size"] in counts:
                print(" | ".join([r[k] for k in keys] + [
                    r["world_size"], r["buckets"], f"{float(r['scaling_efficiency']):.1%}",
                    f"{float(r['step_time_s.mean']):.3f}", f"{float(r['comm_time_s']):.3f}",
                    f"{float(r['slowdown']):.3f}"]))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BrokenPipeError:  # piped into head
        sys.exit(0)
