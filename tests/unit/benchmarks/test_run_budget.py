"""benchmarks/run_budget.py: its options refuse bad input with argparse's exit 2."""

import pytest

from tests.conftest import load_benchmark


@pytest.mark.parametrize("argv", [["--nodes", "x"], ["--nodes", "0"], ["--steps", "0"], ["--repeats", "0"]])
def test_bad_options_exit_2_before_measuring(argv, monkeypatch, capsys):
    bench = load_benchmark("run_budget")
    monkeypatch.setattr(bench, "measure", lambda *a, **k: pytest.fail("measured despite a bad option"))
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2 and argv[0] in capsys.readouterr().err


def test_the_scenario_it_measures_is_jittered_and_sized_as_asked():
    doc = load_benchmark("run_budget").scenario_doc(32, 500)
    assert doc["steps"] == 500 and doc["cluster"]["nodes"] == 32 and doc["stragglers"][0]["kind"] == "jitter"
