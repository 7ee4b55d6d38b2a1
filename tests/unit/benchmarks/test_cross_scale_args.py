"""benchmarks/cross_scale.py refuses what it cannot do before its minutes of fitting: a --json
path in no directory, a --ring-steps that names no series (the empty name included)."""

from __future__ import annotations

import pytest

from tests.conftest import load_benchmark

cross_scale = load_benchmark("cross_scale")


@pytest.mark.parametrize("args, text", [
    (["--json", "{tmp}/missing/out.json"], "cannot write here: the folder"),
    (["--ring-steps", ""], "--ring-steps: no series ''"),
])
def test_refused_before_the_run(tmp_path, capsys, args, text):
    with pytest.raises(SystemExit) as exc:
        cross_scale.main([a.format(tmp=tmp_path) for a in args])
    assert exc.value.code == 2
    assert text in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()
