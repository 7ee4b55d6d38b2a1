"""commsim validate JSON files as plot data: numeric case order, errors, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commsim.analysis.sweep_table import ResultsError
from commsim.analysis.validation_cases import is_validation, load_cases, median_abs_error


def validation_json(path: Path, name: str, measured: float, predicted: float) -> Path:
    path.write_text(json.dumps({
        "scenario": name,
        "measured": {"step_time_s": {"mean": measured, "p95": measured * 1.1}},
        "predicted": {"step_time_s": {"mean": predicted, "p95": predicted * 1.05}},
    }))
    return path


def test_cases_are_in_numeric_order_of_their_names(tmp_path):
    """validate.accuracy writes bucket_1MB.json, bucket_25MB.json, bucket_100MB.json: a
    directory listing puts 100MB first."""
    files = [validation_json(tmp_path / f"{n}.json", n, m, p) for n, m, p in
             [("bucket_100MB", 0.22, 0.21), ("bucket_1MB_slow", 0.36, 0.29), ("bucket_1MB", 0.28, 0.27),
              ("bucket_25MB", 0.17, 0.16)]]
    cases = load_cases(sorted(files))
    assert [c.name for c in cases] == ["bucket_1MB", "bucket_1MB_slow", "bucket_25MB", "bucket_100MB"]
    assert cases[0].error_pct == pytest.approx((0.27 - 0.28) / 0.28 * 100)
    # |errors| 3.57, 19.4, 5.88, 4.55 %: the median is the mean of the middle two
    assert median_abs_error(cases) == pytest.approx((1 / 22 + 1 / 17) / 2 * 100)


def test_repeated_names_get_the_file_stem(tmp_path):
    a = validation_json(tmp_path / "a.json", "same", 1.0, 1.1)
    b = validation_json(tmp_path / "b.json", "same", 1.0, 0.9)
    assert [c.name for c in load_cases([a, b])] == ["same", "same (b)"]


def test_foreign_json_is_an_input_error(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"not": "validate"}')
    assert not is_validation(json.loads(other.read_text()))
    with pytest.raises(ResultsError, match="expected commsim validate JSON"):
        load_cases([other])
    with pytest.raises(ResultsError, match="cannot read"):
        load_cases([tmp_path / "missing.json"])
    zero = validation_json(tmp_path / "z.json", "z", 0.0, 1.0)
    with pytest.raises(ResultsError, match="positive measured"):
        load_cases([zero])
