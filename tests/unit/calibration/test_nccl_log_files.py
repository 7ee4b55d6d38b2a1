"""An nccl-tests log is read only from a regular file of bounded size: /dev/zero was read until
memory ran out (the process was killed), a FIFO blocked for a writer."""

import os
from pathlib import Path

import pytest

from commsim.calibration import nccl_log
from commsim.calibration.nccl_log import NcclLogError, load_nccl_log, read_log_text
from commsim.calibration.nccl_tables import load_tables

LOG = Path(__file__).resolve().parents[2] / "data" / "nccl-tests" / "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt"


@pytest.mark.parametrize("load", [load_nccl_log, load_tables])
def test_a_character_device_is_refused_before_it_is_read(load):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with pytest.raises(NcclLogError, match=r"^/dev/zero: is a character device, expected an nccl-tests log"):
        load("/dev/zero")


@pytest.mark.parametrize("load", [load_nccl_log, load_tables])
def test_a_fifo_is_refused_without_waiting_for_a_writer(load, tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    with pytest.raises(NcclLogError, match=r"is a named pipe \(FIFO\), expected an nccl-tests log"):
        load(str(fifo))


def test_a_log_past_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(nccl_log, "MAX_LOG_BYTES", 1000)
    with pytest.raises(NcclLogError, match="is more than 1,000 bytes, the limit for an nccl-tests log"):
        read_log_text(str(LOG))


def test_a_bom_and_windows_line_endings_read_as_the_plain_log(tmp_path):
    odd = tmp_path / "log.txt"
    odd.write_bytes(b"\xef\xbb\xbf" + LOG.read_bytes().replace(b"\n", b"\r\n"))
    assert read_log_text(str(odd)).splitlines() == LOG.read_text().splitlines()
    assert load_nccl_log(str(odd)).rows == load_nccl_log(str(LOG)).rows
