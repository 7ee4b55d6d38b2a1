"""A Simple ring step across nodes where the plugin sends long messages by rendezvous: the
proxy's rendezvous work of one slice overlaps the transfer of the other (NCCL_STEPS slots in
flight). The closed form (:func:`nccl.simple.net_rendezvous_step_us`) against a per-message event
simulation of the ring, exact cases, and its effect on a Polaris ring price."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.physical import physical_time_us
from commsim.collectives.nccl.scale import Scale
from commsim.collectives.nccl.simple import net_rendezvous_step_us, simple_ring_slices
from commsim.network.system import preset

KB, MB = 1 << 10, 1 << 20


def _ring_events(ranks: int, steps: int, c: float, slices, floor: float = 0.0) -> float:
    """Finish time (us) of a ring where every rank sends each step's slices (transfer times
    `slices`) to the next rank: slice j of step s waits for slice j of step s-1 from the previous
    rank, then for the receiving proxy's work on it (max(floor, c): its per-message work or its
    rendezvous, one message after the other), then for the sender's link (one after the other)."""
    done = {}
    cpu = [0.0] * ranks
    link = [0.0] * ranks
    work = max(floor, c)
    for s in range(steps):
        for j, t in enumerate(slices):
            for r in range(ranks):
                ready = 0.0 if s == 0 else done[((r - 1) % ranks, s - 1, j)]
                rc = (r + 1) % ranks
                cpu[rc] = max(ready, cpu[rc]) + work
                link[r] = max(cpu[rc], link[r]) + t
                done[(r, s, j)] = link[r]
    return max(done.values())


def _polaris():
    return replace(preset("polaris"), nccl_version="2.21", net_rdzv_us=23.0)


def _closed_form(system, size, ranks, floor, T):
    return float(net_rendezvous_step_us(system, np.array([float(size)]), ranks, 4.0, floor, T)[0]) + T


@pytest.mark.parametrize("seed", range(12))
def test_step_equals_event_simulation_steady_state(seed):
    # the steady-state step of the simulated ring (the slope of its finish time over steps) is the
    # closed form's step, with one and with two rendezvous slices a step
    rng = np.random.default_rng(seed)
    system = _polaris()
    ranks = int(rng.integers(3, 9))
    size = float(rng.choice([1, 2, 4, 8, 16, 32, 64, 128])) * ranks * 4 * 16 * KB  # chunk 16K..2M
    T = float(rng.uniform(2.0, 150.0))
    floor = float(rng.uniform(0.0, 40.0))
    b = simple_ring_slices(np.array([size]), ranks, 4.0)[0]
    slices = [T * x / b.sum() for x in b if x > 0]
    c = system.net_rdzv_us
    per_step = (_ring_events(ranks, 80, c, slices, floor) - _ring_events(ranks, 40, c, slices, floor)) / 40.0
    assert _closed_form(system, size, ranks, floor, T) == pytest.approx(per_step, rel=1e-9, abs=1e-6)


def test_exact_cases():
    s = _polaris()
    # two 64 KiB slices (8x4, 16 MB): the proxy's two rendezvous bind below 2c of transfer ...
    assert _closed_form(s, 16 * MB, 32, 10.0, 14.0) == pytest.approx(46.0)
    # ... the link above it (the rendezvous hides behind the transfer) ...
    assert _closed_form(s, 16 * MB, 32, 10.0, 115.0) == pytest.approx(115.0)
    # ... and a per-message floor longer than c costs the proxy that much a message
    assert _closed_form(s, 16 * MB, 32, 40.0, 30.0) == pytest.approx(80.0)
    assert _closed_form(s, 16 * MB, 32, 40.0, 100.0) == pytest.approx(100.0)
    # one 32 KiB message a step (8x4, 4 MB): no overlap, max(floor, c) + T as before
    assert _closed_form(s, 4 * MB, 32, 10.0, 4.0) == pytest.approx(27.0)
    assert _closed_form(s, 4 * MB, 32, 30.0, 4.0) == pytest.approx(34.0)
    # eager messages only (a 4 KiB chunk): the floor + T
    assert _closed_form(s, 512 * KB, 32, 10.0, 1.0) == pytest.approx(11.0)
    # no rendezvous threshold: the floor, unchanged
    none = replace(s, net_rdzv_threshold_bytes=None)
    assert float(net_rendezvous_step_us(none, np.array([16.0 * MB]), 32, 4.0, 10.0, 14.0)[0]) == 10.0


def test_ring_price_hides_rendezvous_behind_a_long_transfer():
    # Polaris 8x4 ring/Simple all_gather: at 256 MB (1 MiB slices, ~230 us a step) the rendezvous
    # cost no longer adds to the price; at 16 MB (64 KiB slices, ~14 us) every step pays 2c
    sc = Scale.of(preset("polaris"), 8, 4)
    lo, hi = _polaris(), replace(_polaris(), net_rdzv_us=33.0)
    sizes = np.array([16.0 * MB, 256.0 * MB])
    t_lo = physical_time_us("all_gather", "ring", "Simple", sizes, lo, sc)
    t_hi = physical_time_us("all_gather", "ring", "Simple", sizes, hi, sc)
    assert t_hi[1] == pytest.approx(t_lo[1], rel=1e-12)
    assert t_hi[0] - t_lo[0] == pytest.approx(31 * 2 * 10.0, rel=1e-9)  # 31 steps x 2 slices x 10 us
