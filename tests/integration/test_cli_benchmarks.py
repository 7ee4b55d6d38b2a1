"""The benchmark scripts the README quotes: a rerun must not overwrite a committed measurement."""

import argparse
import subprocess
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "measurements" / "scale.json"


@pytest.fixture(scope="module")
def scale():
    return load_benchmark("scale")


def _parser():
    return argparse.ArgumentParser(prog="scale.py")


def _git_tracks(path: Path) -> bool:
    return subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], cwd=ROOT, capture_output=True).returncode == 0


def test_scale_writes_to_an_ignored_folder_by_default(scale):
    path = scale.output_path(_parser(), None, update_committed=False)
    assert path == ROOT / "out" / "scale.json"
    assert subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT).returncode == 0


def test_scale_refuses_a_committed_file_before_measuring(scale, capsys):
    if not _git_tracks(COMMITTED):
        pytest.skip("not a git checkout: nothing is committed")
    before = COMMITTED.read_bytes()
    with pytest.raises(SystemExit) as exc:
        scale.output_path(_parser(), str(COMMITTED), update_committed=False)
    assert exc.value.code == 2 and "--update-committed" in capsys.readouterr().err
    assert scale.output_path(_parser(), str(COMMITTED), update_committed=True) == COMMITTED
    assert COMMITTED.read_bytes() == before


def test_scale_refuses_a_missing_folder(scale, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        scale.output_path(_parser(), str(tmp_path / "no" / "scale.json"), update_committed=False)
    assert exc.value.code == 2 and "does not exist" in capsys.readouterr().err
