"""Tests for commsim.calibration.file: round trip, strict reading, one-line errors."""

import json
import os

from pathlib import Path

import pytest
import yaml

from commsim.calibration.file import calibration_to_dict
from commsim.calibration import (
    Calibration,
    CalibrationError,
    Measurement,
    Provenance,
    fit_link,
    load_calibration,
    model_time,
    save_calibration,
)

SIZES = [8 * 2**k for k in range(28)]


def synthetic(alpha, beta, n, sizes=SIZES):
    return [Measurement(int(s), float(model_time(alpha, beta, s, n)), n) for s in sizes]


def full_cal():
    from commsim.calibration.model import ComputeTiming, RankCompute, SourceFile

    prov = Provenance(
        backend="gloo", world_size=2, hostnames=("h1",), torch_version="2.13.0", nccl_version=None,
        gloo_version="gloo (torch 2.13.0)", date="2026-11-30T08:00:00Z", command="commsim calibrate --backend gloo",
        sources=(SourceFile("a.txt", "ab" * 32, "./all_reduce_perf -b 8"),),
    )
    compute = ComputeTiming(1000, 4, 0.01, 0.02, (RankCompute(0, 0.01, 0.02), RankCompute(1, 0.011, 0.021)))
    return Calibration((fit_link("intra_node", synthetic(2e-6, 3e9, 2)),), prov, compute)


def test_save_load_round_trip(tmp_path):
    cal = full_cal()
    path = tmp_path / "cal.yaml"
    save_calibration(cal, path)
    assert load_calibration(path) == cal
    # the file is plain YAML with the documented top-level keys, and no temp file is left
    doc = yaml.safe_load(path.read_text())
    assert list(doc) == ["format", "provenance", "levels", "compute"]
    assert [p.name for p in tmp_path.iterdir()] == ["cal.yaml"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def _write(tmp_path, doc):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(json.loads(json.dumps(doc))) if not isinstance(doc, str) else doc)
    return p


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (lambda d: d.update(format="other/1"), "format: expected"),
        (lambda d: d.update(extra=1), "unknown key 'extra'"),
        (lambda d: d["levels"]["intra_node"].update(alpha_s=-1.0), r"levels.intra_node.alpha_s: expected a finite number >= 0"),
        (lambda d: d["levels"]["intra_node"].update(beta_Bps="fast"), r"levels.intra_node.beta_Bps"),
        (lambda d: d["levels"].update(nvlink=d["levels"]["intra_node"]), r"levels: expected level names"),
        (lambda d: d["levels"]["intra_node"]["table"]["rows"][0].__setitem__(1, 0), r"rows\[0\]\[1\] \(time_s\)"),
        (lambda d: d["levels"]["intra_node"]["table"]["rows"][3].__setitem__(3, 1.0), r"rows\[3\]\[3\] \(busbw_Bps\)"),
        (lambda d: d["levels"]["intra_node"]["table"]["rows"].reverse(), "must be sorted"),
        (lambda d: d["provenance"].pop("backend"), "missing key 'backend'"),
        (lambda d: d["compute"].update(forward_s=None), "compute.forward_s"),
        (lambda d: d["levels"]["intra_node"]["ranges"][0].update(beta_Bps=0), r"ranges\[0\].beta_Bps"),
        (lambda d: d["levels"]["intra_node"].update(ranges=[]), r"levels.intra_node.ranges: expected a non-empty list"),
    ],
)
def test_bad_files_raise_one_line_errors(tmp_path, mutate, msg):
    doc = calibration_to_dict(full_cal())
    mutate(doc)
    with pytest.raises(CalibrationError, match=msg) as exc:
        load_calibration(_write(tmp_path, doc))
    assert "\n" not in str(exc.value) and str(tmp_path) in str(exc.value)


def test_unreadable_and_non_yaml_files(tmp_path):
    with pytest.raises(CalibrationError, match="cannot read"):
        load_calibration(tmp_path / "missing.yaml")
    with pytest.raises(CalibrationError, match="not valid YAML"):
        load_calibration(_write(tmp_path, "a: [1, 2\n"))
    with pytest.raises(CalibrationError, match="expected a mapping"):
        load_calibration(_write(tmp_path, "- 1\n"))


def test_non_utf8_file_is_a_one_line_error(tmp_path):
    bad = tmp_path / "cal.yaml"
    bad.write_bytes(b"format: 1\n\xff\xfe\x00garbage\n")
    with pytest.raises(CalibrationError, match=r"cal\.yaml: not a UTF-8 text file"):
        load_calibration(bad)


def test_run_with_a_non_utf8_calibration_exits_2(tmp_path, capsys):
    from commsim.cli.main import run_cli

    bad = tmp_path / "cal.yaml"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    root = str(Path(__file__).resolve().parents[3])
    code = run_cli(["run", os.path.join(root, "scenarios", "validate_gloo_2rank.yaml"), "-q", "--steps", "2",
                    "--calibration", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "not a UTF-8 text file" in err and str(bad) in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("epoch", ["9" * 30, "253402300800", "99999999999999999"])
def test_source_date_epoch_out_of_range_is_a_one_line_error(epoch, monkeypatch):
    from commsim.calibration.file import utc_now_iso

    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    with pytest.raises(CalibrationError, match=f"SOURCE_DATE_EPOCH: expected .* got '{epoch}'"):
        utc_now_iso()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert utc_now_iso() == "2023-11-14T22:13:20Z"


def test_yaml11_exponent_without_dot_is_a_number(tmp_path):
    # PyYAML (YAML 1.1) reads `1e-6` as the string '1e-6'; a hand-written file means the number
    import re

    path = tmp_path / "cal.yaml"
    save_calibration(full_cal(), path)
    text = re.sub(r"(?m)^(  intra_node:\n    alpha_s:) .*$", r"\1 1e-6", path.read_text(), count=1)
    text = re.sub(r"(?m)^(    beta_Bps:) .*$", r"\1 3e9", text, count=1)
    assert "alpha_s: 1e-6\n    beta_Bps: 3e9\n" in text and yaml.safe_load(text)["levels"]["intra_node"]["alpha_s"] == "1e-6"
    path.write_text(text)
    lv = load_calibration(path).level("intra_node")
    assert (lv.alpha_s, lv.beta_Bps) == (1e-6, 3e9)


@pytest.mark.parametrize("value", ["fast", "nan", "inf", "1e400", "-1e-6"])
def test_strings_that_are_no_finite_number_stay_errors(tmp_path, value):
    doc = calibration_to_dict(full_cal())
    doc["levels"]["intra_node"]["alpha_s"] = value
    with pytest.raises(CalibrationError, match=r"levels.intra_node.alpha_s: expected a finite number"):
        load_calibration(_write(tmp_path, doc))


def _three_ranges():
    doc = calibration_to_dict(full_cal())
    doc["levels"]["intra_node"]["ranges"] = [
        {"min_size_bytes": 8, "max_size_bytes": 1024, "alpha_s": 2e-6, "beta_Bps": 3e9},
        {"min_size_bytes": 2048, "max_size_bytes": 2**20, "alpha_s": 2e-6, "beta_Bps": 3e9},
        {"min_size_bytes": 2**21, "alpha_s": 2e-6, "beta_Bps": 3e9},
    ]
    return doc


@pytest.mark.parametrize("index,max_size", [(0, 2048), (0, 4096), (1, 2**21), (1, 2**30)])
def test_overlapping_ranges_are_rejected(tmp_path, index, max_size):
    doc = _three_ranges()
    load_calibration(_write(tmp_path, doc))  # disjoint: fine
    doc["levels"]["intra_node"]["ranges"][index]["max_size_bytes"] = max_size
    with pytest.raises(CalibrationError, match=rf"ranges\[{index}\].max_size_bytes: expected less than the next"):
        load_calibration(_write(tmp_path, doc))
