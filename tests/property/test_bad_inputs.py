"""The loader's share of the bad-input corpus (tests/property/bad_inputs.py), in-process:
every scenario file, ``--set`` value and ``--steps`` flag of it is refused with one InputError
line, quickly. (FIFO and /dev/zero, which could block or fill memory if the checks broke, run
in a child with a timeout in tests/unit/test_yamlio.py; the grid and calibration cases belong to
their readers' tests and the property test.)"""

from __future__ import annotations

import time

import pytest

from bad_inputs import SCENARIO, cases
from commsim.errors import InputError
from commsim.scenario.loader import load_scenario

LOADER_CASES = [c for c in cases() if c.reader in ("scenario", "set", "flag") and c.file not in ("fifo", "devzero")]


@pytest.mark.parametrize("case", LOADER_CASES, ids=[c.name for c in LOADER_CASES])
def test_the_loader_refuses_in_one_line(case, tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    target = tmp_path / "input.yaml"
    if case.file == "dir":
        target.mkdir()
    elif isinstance(case.file, bytes):
        target.write_bytes(case.file)
    elif case.file is not None:
        target.write_text(case.file, encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(InputError) as err:
        if case.reader == "scenario":
            load_scenario(target)
        elif case.reader == "set":
            load_scenario(scenario, overrides=[v for flag, v in zip(case.argv, case.argv[1:]) if flag == "--set"])
        else:
            load_scenario(scenario, steps=int(case.argv[-1]))
    assert time.perf_counter() - start < 10  # each is refused in milliseconds
    message = str(err.value)
    assert "\n" not in message and message.startswith((str(target), str(scenario), "--set")), message


def test_the_corpus_covers_every_reader():
    readers = {c.reader for c in cases()}
    assert readers == {"scenario", "set", "flag", "grid", "grid-option", "calibration"}
    assert len(LOADER_CASES) >= 40
