"""benchmarks/ddp_buckets_gloo.py --from-raw: a missing, truncated or other file is one line on
stderr naming it (and the key), exit 2, and no --json written (no torch needed: it is refused
before anything is measured or predicted)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_benchmark

bench = load_benchmark("ddp_buckets_gloo")


def _raw(**changes):
    # every key measure() writes, with rounds that are not a measurement's
    raw = {k: [] for k in ("caps", "fit_caps", "rounds", "steps", "parameters", "batch_size", "width", "plan",
                           "results", "load_before", "load_after", "wall_s")}
    raw.update(caps=["1MB", "25MB"], fit_caps=["4MB", "10MB"], rounds=2, steps=3, results=[])
    raw.update(changes)
    return json.dumps(raw)


@pytest.mark.parametrize("text, where", [
    (None, "file not found"),
    ('{"caps": ["1MB"', "not JSON"),
    ("[1]", "a mapping"),
    ('{"mode": "ddp"}', "caps: missing"),
    (_raw(caps=["1MB"]), "caps: expected the two compared caps"),
    (_raw(caps=["1MB", "bogus"]), "caps[1]: "),
    (_raw(), "not a --save-raw measurement ("),
])
def test_a_bad_raw_file_is_one_line_and_exit_2(tmp_path, capsys, text, where):
    path = tmp_path / "raw.json"
    if text is not None:
        path.write_text(text)
    out = tmp_path / "out.json"
    assert bench.main(["--from-raw", str(path), "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ddp_buckets_gloo.py: error: {path}: "), err
    assert where in err
    assert not out.exists()


@pytest.mark.parametrize("option", ["--json", "--save-raw"])
def test_an_output_in_no_directory_is_refused_before_the_run(tmp_path, capsys, option):
    raw = tmp_path / "raw.json"
    raw.write_text(_raw())
    with pytest.raises(SystemExit) as exc:
        bench.main(["--from-raw", str(raw), option, str(tmp_path / "missing" / "out.json")])
    assert exc.value.code == 2
    assert f"{option} {tmp_path / 'missing' / 'out.json'}: cannot write here: the folder" in capsys.readouterr().err
