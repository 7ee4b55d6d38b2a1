"""benchmarks/mitigations.py's "without P and Q" experiment really removes the P and Q all-reduces."""

from pathlib import Path

import pytest

from commsim.mitigations.compression import PowerSGDHook
from commsim.mitigations.hooked import Reduce
from commsim.mitigations.spec import PowerSGD
from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("mitigations")


def test_without_pq_keeps_the_work_and_only_the_first_all_reduce(bench):
    sc = bench.scenario(8, 2e-3)
    cfg = PowerSGD(r=bench.RANK, shapes="resnet50", start=0, **bench.V100)
    full = PowerSGDHook(sc, cfg).stages(1, 0, 25e6)
    cut = bench.WithoutPQ(sc, cfg).stages(1, 0, 25e6)
    assert sum(isinstance(s, Reduce) for s in full) == 3
    assert [s for s in cut if isinstance(s, Reduce)] == [next(s for s in full if isinstance(s, Reduce))]
    assert [s for s in cut if not isinstance(s, Reduce)] == [s for s in full if not isinstance(s, Reduce)]


def test_without_pq_is_faster_where_latency_binds(bench):
    assert bench.speedup(8, 2e-3, bench.WithoutPQ) > 1.2 * bench.speedup(8, 2e-3)
