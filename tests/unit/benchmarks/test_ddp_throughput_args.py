"""benchmarks/ddp_throughput.py refuses a --json path in no directory before its run (not with
a traceback after it)."""

from __future__ import annotations

import pytest

from tests.conftest import load_benchmark

ddp_throughput = load_benchmark("ddp_throughput")


def test_json_in_no_directory_is_refused_before_the_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        ddp_throughput.main(["--json", str(tmp_path / "missing" / "out.json")])
    assert exc.value.code == 2
    assert "--json " + str(tmp_path / "missing" / "out.json") + ": cannot write here: the folder" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()
