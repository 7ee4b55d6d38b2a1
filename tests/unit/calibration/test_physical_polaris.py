"""The NCCL release a log ran, read from its provenance line (the Polaris logs print no banner)."""

import os

import pytest

from commsim.calibration.nccl_log import parse_nccl_log
from commsim.calibration.nccl_tables import load_tables

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "nccl-tests-multiscale")

ROWS = """#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    20.00    0.05    0.09      0    20.00    0.05    0.09      0
     1048576        262144     float     sum      -1   100.00   10.49   18.35      0   100.00   10.49   18.35      0
"""


@pytest.mark.parametrize("name,version", [
    ("Polaris-A100_8x4_alcf-nccl2.21-allreduce.txt", "2.21.5"),
    ("Polaris-A100_8x4_alcf-nccl2.18-allreduce.txt", "2.18"),
    ("Polaris-A100-defaultenv_2x4_alcf-nccl2.18-allreduce.txt", "2.18"),
])
def test_polaris_logs_say_their_release(name, version):
    assert load_tables(os.path.join(DATA, name), world_size=int(name.split("_")[1].split("x")[0]) * 4).nccl_version == version


def _version(header: str):
    return parse_nccl_log(header + ROWS, "log.txt", world_size=8).nccl_version


def test_source_line_version_is_read_and_a_banner_wins():
    src = "# source: somewhere; NCCL 2.21.5-1+cuda12.4; NCCL_NET_GDR_LEVEL=PHB\n"
    assert _version(src) == "2.21.5"
    assert _version("# source: x; NCCL 2.18.x from NVHPC 23.9\n") == "2.18"
    assert _version(src + "# nccl-tests version 2.13.8 nccl-headers=21903 nccl-library=21903\n") == "2.19.3"


def test_no_release_without_one_on_the_source_line():
    assert _version("# source: x; NCCL_NET_GDR_LEVEL=PHB NCCL_CROSS_NIC=1\n") is None
    assert _version("# a comment that says NCCL 2.21.5 but is no source line\n") is None
