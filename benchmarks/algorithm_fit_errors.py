"""How well each all-reduce algorithm, priced with a calibration fitted from a
published nccl-tests log, reproduces that log's busbw (sizes >= 1 MiB).

    python benchmarks/algorithm_fit_errors.py [LOG ...]

For each log: fit a calibration (commsim calibrate --from-nccl-tests), build the log's topology
(its nodes x ranks per node) with the calibration's fitted alpha and B per link level and size
range (as `commsim collective SCENARIO --calibration` does), and compare every algorithm's
closed-form busbw with the measured one: median / max |error| in %. The ring is the algorithm
the calibration's model describes (NCCL's logs are mostly rings at these sizes); the others show
how far an algorithm choice moves the prediction on the same links.

For the multi-node logs a second table: the calibration's network level plus nominal NVLink
numbers for the hops inside a node (the preset of the log's system), to see how much a
network-only calibration predicts.
"""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import replace

import numpy as np

from commsim import calibration as calib
from commsim.sim.links import fitted_fabric
from commsim.calibration.from_logs import calibration_from_nccl_logs
from commsim.collectives import Fabric, algorithms_for, busbw, uniform_time
from commsim.scenario.topology import fabric as preset_fabric

HERE = os.path.dirname(os.path.abspath(__file__))
ALGORITHMS = [a for a in algorithms_for("alpha-beta") if a not in ("reduce_scatter", "all_gather")]
# The system each multi-node log was measured on, for its nominal intra-node numbers.
NOMINAL_INTRA = {"H100": "dgx-h100", "GH200": "dgx-h100"}


def log_fabric(cal, nodes: int) -> Fabric:
    n = cal.provenance.world_size
    return Fabric(nodes=nodes, gpus_per_node=n // nodes, intra_latency=1e-6, intra_bandwidth=1e9,
                  inter_latency=1e-6, inter_bandwidth=1e9)  # placeholders: replaced per size below


def errors(cal, fabric_for_size, name):
    n = cal.provenance.world_size
    rows = [m for m in cal.level().rows_for(n) if m.size_bytes >= calib.FIT_ERROR_MIN_SIZE]
    errs = []
    for m in rows:
        f = fabric_for_size(m.size_bytes)
        t = uniform_time(name, f, m.size_bytes)
        errs.append(abs(busbw("all_reduce", m.size_bytes, t, n) / m.busbw - 1) * 100)
    return np.median(errs), max(errs)


def main(paths):
    paths = paths or sorted(glob.glob(os.path.join(HERE, "..", "tests", "data", "nccl-tests", "*.txt")))
    print("busbw error at sizes >= 1 MiB, median/max %, calibrated links (fitted alpha, B per level and size range)")
    print(f"{'log':40s} {'n':>3s} {'nodes':>5s} " + " ".join(f"{a[:16]:>16s}" for a in ALGORITHMS))
    multi = []
    for p in paths:
        cal, logs = calibration_from_nccl_logs([p])
        nodes = max(1, logs[0][1].nodes or 1)
        base = log_fabric(cal, nodes)
        cells = []
        for name in ALGORITHMS:
            med, mx = errors(cal, lambda s: fitted_fabric(base, cal).at_size(s), name)
            cells.append(f"{med:7.1f}/{mx:7.1f}")
        print(f"{os.path.basename(p)[:40]:40s} {cal.provenance.world_size:3d} {nodes:5d} " + " ".join(f"{c:>16s}" for c in cells))
        if nodes > 1:
            multi.append((p, cal, base))
    for p, cal, base in multi:
        key = next((k for k in NOMINAL_INTRA if os.path.basename(p).startswith(k)), None)
        nominal = preset_fabric(NOMINAL_INTRA[key], 1) if key else None
        if nominal is None:
            continue

        def mixed(size, cal=cal, base=base, nominal=nominal):
            f = fitted_fabric(base, cal).at_size(size)  # the network level from the log ...
            return replace(f, intra_latency=nominal.intra_latency, intra_bandwidth=nominal.intra_bandwidth)  # ... NVLink nominal

        print(f"\n{os.path.basename(p)}: network level from the log, intra-node hops nominal ({NOMINAL_INTRA[key]}: "
              f"{nominal.intra_bandwidth / 1e9:.0f} GB/s, {nominal.intra_latency * 1e6:.1f} us)")
        for name in ALGORITHMS:
            med, mx = errors(cal, mixed, name)
            print(f"  {name:18s} median {med:6.1f}%  max {mx:6.1f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
