"""The `mitigation:` section: accepted by the schema, read after overrides, swept by the sweep,
refused by `commsim run`."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from commsim.mitigations.section import mitigation_section, refuse_section, section_rows
from commsim.mitigations.spec import Compression, MitigationError, PowerSGD
from commsim.scenario.loader import load_scenario
from commsim.sweep.grid import parse_grid_args
from commsim.sweep.plan import fingerprint, plan_sweep
from commsim.sweep.run import run_sweep

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "scenarios" / "seed_1b_8gpu_eth25.yaml"
SECTION = "\nmitigation:\n  - {remedy: powersgd, r: 4, start: 0}\n  - fp16\n"


@pytest.fixture
def with_section(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.read_text() + SECTION)
    return path


def cli(*args):
    return subprocess.run([sys.executable, "-m", "commsim.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True)


def test_the_schema_accepts_the_section_and_the_scenario_is_unchanged(with_section, tmp_path):
    plain = tmp_path / "plain" / "s.yaml"  # the same stem: the same default name
    plain.parent.mkdir()
    plain.write_text(BASE.read_text())
    assert load_scenario(with_section) == load_scenario(plain)
    assert fingerprint(load_scenario(with_section)) == fingerprint(load_scenario(plain))


def test_section_is_read_after_overrides(with_section):
    plain = mitigation_section(with_section)
    assert [type(r) for m in plain for r in m.remedies] == [PowerSGD, Compression]
    assert plain[0].get(PowerSGD).r == 4
    assert mitigation_section(with_section, ["mitigation[0].r=1"])[0].get(PowerSGD).r == 1
    assert mitigation_section(BASE) is None


def test_bad_key_names_its_path(with_section):
    with pytest.raises(MitigationError, match=r"mitigation\[0\]\.rr: unknown parameter of powersgd"):
        mitigation_section(with_section, ["mitigation[0].rr=2"])
    with pytest.raises(MitigationError, match=r"mitigation: expected a non-empty list"):
        mitigation_section(with_section, ["mitigation=3"])


def test_run_refuses_a_section_in_one_line(with_section, tmp_path):
    refuse_section(BASE)  # none: nothing raised
    with pytest.raises(MitigationError, match="commsim compare"):
        refuse_section(with_section)
    out = cli("run", with_section, "-q", "--json", tmp_path / "out.json")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "mitigation:" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "out.json").exists()


def test_sweep_over_a_remedy_parameter(with_section, tmp_path):
    grid = parse_grid_args(["mitigation[0].r=1,4"])
    points = plan_sweep(with_section, grid, steps=6)
    assert [p.mitigations[0].get(PowerSGD).r for p in points] == [1, 4]
    assert points[0].key != points[1].key  # same scenario, different remedies: two points
    assert points[0].scenario == points[1].scenario
    run_sweep(with_section, grid, tmp_path / "out", steps=6, progress=False)
    rows = list(csv.DictReader(open(tmp_path / "out" / "results.csv")))
    assert [r["mitigation.0.mitigation"] for r in rows] == ["powersgd:r=1:start=0", "powersgd:r=4:start=0"]
    assert [r["mitigation.1.mitigation"] for r in rows] == ["fp16", "fp16"]
    ratios = [float(r["mitigation.0.details.compression_ratio"]) for r in rows]
    assert ratios[0] > 3 * ratios[1]  # rank 1 sends about a quarter of rank 4's P and Q
    # the rows are compare's rows for that point
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "grid" in doc
    expected = section_rows(points[1].scenario, points[1].mitigations)
    assert float(rows[1]["mitigation.0.step_time_s.mean"]) == pytest.approx(expected["0"]["step_time_s"]["mean"])


def test_sweep_without_a_section_keeps_its_keys():
    grid = parse_grid_args(["ddp.bucket_cap=25MB,50MB"])
    points = plan_sweep(BASE, grid, steps=3)
    assert [p.key for p in points] == [fingerprint(p.scenario) for p in points]
    assert all(p.mitigations == () for p in points)


def test_sweep_bad_remedy_value_is_one_line_exit_2(with_section, tmp_path):
    out = cli("sweep", with_section, "--grid", "mitigation[0].r=0,4", "--steps", "3", "-o", tmp_path / "o")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "mitigation[0].r" in out.stderr and "grid point 0" in out.stderr and "Traceback" not in out.stderr
    # a remedy this scenario cannot take (b >= n) is refused before anything runs, too
    path = tmp_path / "b.yaml"
    path.write_text(BASE.read_text() + "\nmitigation:\n  - {remedy: backup, b: 1}\n")
    out = cli("sweep", path, "--grid", "mitigation[0].b=2,8", "--steps", "3", "-o", tmp_path / "o2")
    assert out.returncode == 2 and "b < n" in out.stderr and "grid point 1" in out.stderr
