"""The benchmark scripts the README quotes: a rerun must not overwrite a committed measurement."""

import subprocess
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "measurements" / "scale.json"


@pytest.fixture(scope="module")
def scale():
    return load_benchmark("scale")


def _git_tracks(path: Path) -> bool:
    return subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], cwd=ROOT, capture_output=True).returncode == 0


def test_scale_writes_to_an_ignored_folder_by_default(scale):
    path = scale.output_path(None, update_committed=False)
    assert path == ROOT / "out" / "scale.json"
    assert subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT).returncode == 0


def test_scale_refuses_a_committed_file_before_measuring(scale, capsys):
    if not _git_tracks(COMMITTED):
        pytest.skip("not a git checkout: nothing is committed")
    before = COMMITTED.read_bytes()
    with pytest.raises(SystemExit, match="--update-committed"):
        scale.output_path(str(COMMITTED), update_committed=False)
    assert scale.output_path(str(COMMITTED), update_committed=True) == COMMITTED
    assert COMMITTED.read_bytes() == before


def test_scale_refuses_a_missing_folder(scale, tmp_path):
    with pytest.raises(SystemExit, match="does not exist"):
        scale.output_path(str(tmp_path / "no" / "scale.json"), update_committed=False)
