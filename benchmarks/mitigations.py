"""PowerSGD's published low-bandwidth case, and how long `commsim compare` takes.

The case (PyTorch issue 74148): ResNet-50 on ImageNet, V100-32GB, 2 GPUs per node, nodes
linked at 3 Gbit/s, DDP with powerSGD_hook; measured speed-up over one GPU (throughput ratio):
3.5 on 4 GPUs, 5.23 on 6, 5.46 on 8, and 6.29 on 8 with the hook's P and Q all-reduces removed.
The issue does not give the batch size, the rank or the network latency: this script states
the values it assumes (below) and prints the predicted speed-ups for a range of latencies,
so the gap to the measurement can be read off.

    python benchmarks/mitigations.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commsim.mitigations.compression import PowerSGDHook  # noqa: E402
from commsim.mitigations.hooked import Reduce, run_hooked  # noqa: E402
from commsim.mitigations.spec import PowerSGD  # noqa: E402
from commsim.scenario.spec import DDP, Cluster, Compute, Link, Model, Scenario  # noqa: E402

PUBLISHED = {4: 3.5, 6: 5.23, 8: 5.46}
PUBLISHED_WITHOUT_PQ = {8: 6.29}
# Assumptions, each a stated guess (the issue gives none of them):
BATCH = 64                       # images per GPU per step
STEP_1GPU = BATCH / 360.0        # V100 fp32 ResNet-50 training at ~360 images/s (NVIDIA's DL examples, fp32)
FORWARD, BACKWARD = STEP_1GPU / 3, 2 * STEP_1GPU / 3
V100 = dict(mem_bw=900e9, flops=15.7e12)  # V100 SXM2 datasheet: HBM2 900 GB/s, 15.7 TFLOP/s fp32
RANK = 1                         # PowerSGDState's default matrix_approximation_rank
PARAMETERS = 25_557_032          # torchvision ResNet-50


def scenario(gpus: int, latency: float) -> Scenario:
    return Scenario(
        cluster=Cluster(nodes=gpus // 2, gpus_per_node=2, intra_node=Link(10e9, 10e-6),  # PCIe 3 x16 class
                        inter_node=Link(3e9 / 8, latency)),
        model=Model(parameters=PARAMETERS, grad_dtype="fp32"),
        compute=Compute(forward=FORWARD, backward=BACKWARD, optimizer=0.005, batch_size=BATCH),
        ddp=DDP(), steps=5, name=f"resnet50_v100_{gpus}")


class WithoutPQ(PowerSGDHook):
    """The issue's experiment: the P and Q all-reduces removed (the work kept)."""

    def stages(self, step, bucket, size):
        # the hook's all-reduces in order: the uncompressed tensors', then P's, then Q's; drop the
        # last two by their rank among the Reduce stages (not by position: the hook's Work stages
        # between them change as costs are added)
        out, reduces = [], 0
        for s in super().stages(step, bucket, size):
            if isinstance(s, Reduce):
                reduces += 1
                if reduces > 1:
                    continue
            out.append(s)
        return tuple(out)


def speedup(gpus: int, latency: float, hook_class=PowerSGDHook) -> float:
    sc = scenario(gpus, latency)
    hook = hook_class(sc, PowerSGD(r=RANK, shapes="resnet50", start=0, **V100))
    step = run_hooked(sc, hook).step_time[1:].mean()
    return gpus * (FORWARD + BACKWARD + 0.005) / step


def main() -> None:
    print(f"assumed: batch {BATCH}/GPU, {STEP_1GPU * 1e3:.0f} ms per step on one GPU, rank {RANK}, 2 GPUs per node")
    print(f"{'latency':>10} " + " ".join(f"{g:>2} GPUs (pub {PUBLISHED[g]:.2f})" for g in PUBLISHED) + "   8 w/o P,Q (pub 6.29)")
    for latency in (20e-6, 100e-6, 500e-6, 1e-3, 2e-3, 5e-3):
        cells = " ".join(f"{speedup(g, latency):>19.2f}" for g in PUBLISHED)
        print(f"{latency * 1e6:>8.0f}us {cells} {speedup(8, latency, WithoutPQ):>21.2f}")
    t = time.perf_counter()
    from commsim.mitigations.compare import compare
    from commsim.mitigations.spec import DEFAULT_MITIGATIONS, parse_mitigations
    from commsim.scenario.loader import load_scenario

    compare([load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "32gpu_throttle.yaml")],
            parse_mitigations(DEFAULT_MITIGATIONS))
    print(f"commsim compare scenarios/32gpu_throttle.yaml (default remedies): {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
