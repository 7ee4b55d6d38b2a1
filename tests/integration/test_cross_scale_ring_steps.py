"""benchmarks/cross_scale.py --ring-steps: a series whose predicted sizes the model runs as no
ring says so in one line (not table headers over no rows), and --json carries the rows the text
lists, deterministically and through the module's atomic writer."""

from __future__ import annotations

import io
import json

import pytest

from tests.conftest import load_benchmark

cross_scale = load_benchmark("cross_scale")


def _series(name):
    return next(s for s in cross_scale.SERIES if s.name == name)


def _printed(block) -> list:
    out = io.StringIO()
    cross_scale.print_ring_steps(block, file=out)
    return out.getvalue().splitlines()


def test_a_series_with_no_ring_rows_says_why_in_one_line():
    # GB200 NVL72: NCCL's estimate picks NVLS (tree) at every predicted size >= 1 MB
    block = cross_scale.ring_steps(_series("GB200-NVL72-OCI"))
    assert block["rows"] == [] and block["intercepts"] == []
    assert _printed(block) == ["", "Ring steps: GB200-NVL72-OCI (--pick nccl): no ring rows: the model runs no "
                                   "predicted size >= 1 MB as a ring (nvls_tree/Simple at 4, nvls/Simple at 2 of its 6)"]


def test_a_series_with_too_few_ring_sizes_for_a_fixed_cost_says_why_in_one_line():
    # p4dn: one 1 GB size per predicted scale, a ring row each, no line to fit through them
    block = cross_scale.ring_steps(_series("A100-p4dn"))
    lines = _printed(block)
    assert len(block["rows"]) == 2 and block["intercepts"] == [] and block["rows_note"] is None
    assert lines[-1] == ("Ring/Simple fixed cost per collective: A100-p4dn (--pick nccl): no fixed cost fitted: it "
                         "needs 3 or more ring/Simple sizes (1 MB to 2 GiB) in one log, the most in one is 1")
    assert lines[-2] == "" and len(lines) == 2 + 1 + 2 + 2  # blank, title, header, 2 rows, blank, the note


@pytest.fixture
def quick(monkeypatch):
    """main() without the minutes of the other sections (their JSON keys are not under test here)."""
    monkeypatch.setattr(cross_scale, "run_series", lambda s, pick: {"system": s.name})
    monkeypatch.setattr(cross_scale, "run_single", lambda pick: [])
    monkeypatch.setattr(cross_scale, "run_interpolation", lambda series, pick: [])
    monkeypatch.setattr(cross_scale, "print_report", lambda *a, **k: None)
    writes = []
    real = cross_scale.atomic_write_text
    monkeypatch.setattr(cross_scale, "atomic_write_text", lambda path, text: (writes.append(path), real(path, text)))
    return writes


def test_json_has_the_ring_step_rows_the_text_lists(tmp_path, capsys, quick):
    out = tmp_path / "cs.json"
    assert cross_scale.main(["--ring-steps", "A100-p4dn", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    rs = doc["ring_steps"]
    assert (rs["system"], rs["pick"], rs["rows_note"]) == ("A100-p4dn", "nccl", None)
    assert [r["size_bytes"] for r in rs["rows"]] == [1 << 30, 1 << 30]
    for r in rs["rows"]:  # the printed row, from the JSON's numbers
        assert set(r) >= {"log", "kind", "size_bytes", "pick", "channels", "channels_per_nic", "chunk_bytes", "loops",
                          "steps", "measured_us_per_step", "model_us_per_step", "model_latency_us_per_step",
                          "excess_us_per_step"}
        assert all(isinstance(r[k], (int, float)) and not isinstance(r[k], bool)
                   for k in ("size_bytes", "channels", "chunk_bytes", "loops", "steps", "measured_us_per_step"))
        assert f"{r['measured_us_per_step']:8.1f} {r['model_us_per_step']:8.1f}" in text
    assert rs["intercepts_note"] in text
    assert quick == [str(out)]  # the module's atomic writer: a run cut short leaves the previous file


def test_json_is_byte_identical_run_to_run_and_keyless_without_ring_steps(tmp_path, quick):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    for path in (a, b):
        cross_scale.main(["--ring-steps", "GB200-NVL72-OCI", "--json", str(path)])
    assert a.read_bytes() == b.read_bytes()
    assert json.loads(a.read_text())["ring_steps"]["rows_note"].startswith("GB200-NVL72-OCI (--pick nccl): no ring rows")
    cross_scale.main(["--json", str(c)])
    assert "ring_steps" not in json.loads(c.read_text())


@pytest.mark.parametrize("arg, text", [
    ("", "--json: expected a file path, got an empty path"),  # was: no JSON written, silently
    ("{tmp}", "cannot write here: it is a directory"),  # was: IsADirectoryError after the run
])
def test_a_json_path_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys, arg, text):
    def no_run(*a, **k):
        raise AssertionError("ran before refusing --json")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cross_scale, "run_series", no_run)
        with pytest.raises(SystemExit) as exc:
            cross_scale.main(["--json", arg.format(tmp=tmp_path)])
    assert exc.value.code == 2
    assert text in capsys.readouterr().err
