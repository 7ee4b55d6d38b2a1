"""benchmarks/cross_scale.py runs, and the README's accuracy table says what it computes: every
cell of "Accuracy against published measurements" is the benchmark's median / max |busbw error|
at >= 1 MB for that system, scale and collective (the first log where a scale has two runs)."""

import re
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]

# the README's system labels -> the benchmark's series names
SYSTEMS = {
    "H100 cluster, 8 GPUs per node (NCCL 2.29)": "H100-cluster01",
    "Polaris A100, Slingshot (NCCL 2.18)": "Polaris-A100 (NCCL 2.18)",
    "Polaris A100, Slingshot (NCCL 2.21)": "Polaris-A100 (NCCL 2.21)",
    "Polaris A100, TCP sockets": "Polaris-A100 TCP sockets",
    "GB200 NVL72": "GB200-NVL72-OCI",
}
KINDS = ("all_reduce", "all_gather", "reduce_scatter")


@pytest.fixture(scope="module")
def results():
    mod = load_benchmark("cross_scale")
    wanted = set(SYSTEMS.values())
    return {s.name: mod.run_series(s, "nccl") for s in mod.SERIES if s.name in wanted}


def _readme_rows():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Accuracy against published measurements", 1)[1].split("\n## ", 1)[0]
    rows, system = [], None
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] == "system" or all(c and set(c) <= set("-") for c in cells):
            continue
        system = cells[0] or system
        rows.append((system, cells[1], cells[2:]))
    return rows


def _scales(text: str):
    """'1×4, 1×8, 2×1 → 10×1' / '→ 10×4' / '1×4 → 16×4, 32×4, 48×4': the predicted scales."""
    return [s.strip().replace("×", "x") for s in text.split("→")[1].split(",")]


def _find(result, scale, kind):
    for q in result["predicted"]:  # in log order: the first of two runs at one scale
        if q["scale"] == scale and q["kind"] == kind:
            return q["bands"]["ge1MB"]
    return None


def test_every_readme_cell_is_the_benchmarks_figure(results):
    rows = _readme_rows()
    assert len(rows) >= 8
    checked = 0
    for system, scales_text, cells in rows:
        result = results[SYSTEMS[system]]
        scales = _scales(scales_text)
        for kind, cell in zip(KINDS, cells):
            if cell == "–":
                assert all(_find(result, s, kind) is None for s in scales) or len(scales) > 1, (system, kind)
                continue
            if len(scales) > 1:  # medians only, one per scale
                want = [f"{_find(result, s, kind)[0]:.1f}" for s in scales]
                assert [v.strip() for v in cell.split(",")] == want, (system, scales, kind)
            else:
                med, mx = _find(result, scales[0], kind)[:2]
                assert re.sub(r"\s+", " ", cell) == f"{med:.1f} / {mx:.0f}", (system, scales[0], kind, med, mx)
            checked += 1
    assert checked >= 15


def test_the_benchmark_predicts_every_larger_scale_of_each_series(results):
    for name, r in results.items():
        assert r["predicted"], name
        for q in r["predicted"]:
            med, mx = q["bands"]["ge1MB"][:2]
            assert 0 <= med <= mx < 1000, (name, q["scale"], q["kind"])
            assert q["node_ratio"] > 1
