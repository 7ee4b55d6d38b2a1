"""The CLI's counted lines say "1 rank", "1 step", "1 bucket" for one and the plural otherwise:
import's summary, compare's remedy descriptions, and the "# ..." header lines of collective,
validate and lab."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from commsim.benchsizes import parse_size_range
from commsim.cli.collective import algorithm_tables, physical_table
from commsim.cli.compare import _own
from commsim.cli.lab import calibrate_head, validate_head
from commsim.cli.trace_commands import trace_shape
from commsim.cli.validate import report_head

ROOT = Path(__file__).resolve().parents[3]
SMALL = str(ROOT / "scenarios/validate_gloo_2rank.yaml")  # 1 node x 2 ranks


def test_import_summary():
    assert trace_shape(1, 1, 1) == "1 rank, 1 step, 1 bucket"
    assert trace_shape(2, 3, 4) == "2 ranks, 3 steps, 4 buckets"


@pytest.mark.parametrize("details, mitigation, one, several", [
    ({"H": 1}, "localsgd", "parameters averaged every 1 step", None),
    ({"H": 8}, "localsgd", None, "parameters averaged every 8 steps"),
    ({"buckets": 1}, "baseline", "1 bucket", None),
    ({"buckets": 3}, "baseline", None, "3 buckets"),
    ({"curve": [], "bucket_cap": 2**20, "buckets": 1}, "buckets", "bucket cap 1.0 MiB (1 bucket)", None),
    ({"curve": [], "bucket_cap": 2**20, "buckets": 2}, "buckets", None, "bucket cap 1.0 MiB (2 buckets)"),
    ({"compression_ratio": 4.0, "warmup_steps": 1}, "powersgd", "4x fewer bytes; after 1 warm-up step", None),
    ({"compression_ratio": 4.0, "warmup_steps": 10}, "powersgd", None, "4x fewer bytes; after 10 warm-up steps"),
])
def test_compare_remedy_descriptions(details, mitigation, one, several):
    assert _own({"details": details, "mitigation": mitigation}) == (one or several)


def test_collective_scenario_header():
    _, one_node = algorithm_tables(SMALL, (), "ring", None, None, None, parse_size_range("8:64"))
    assert "2 ranks (1 node x 2), model alpha-beta" in one_node.splitlines()[0]
    _, two = algorithm_tables(SMALL, ("cluster.nodes=2",), "ring", None, None, None, parse_size_range("8:64"))
    assert "4 ranks (2 nodes x 2), model alpha-beta" in two.splitlines()[0]


def test_collective_physical_header():
    sizes = parse_size_range("8:64")
    one = physical_table(None, "dgx-h100", [1], 2, sizes, "all_reduce", None, None)[1].splitlines()[0]
    assert one.startswith("# commsim collective: all_reduce, 1 node x 2 GPUs, nominal dgx-h100"), one
    assert physical_table(None, "dgx-h100", [2], 1, sizes, "all_reduce", None, None)[1].startswith(
        "# commsim collective: all_reduce, 2 nodes x 1 GPU, nominal dgx-h100")
    two = physical_table(None, "dgx-h100", [2], 8, sizes, "all_reduce", None, None)[1].splitlines()[0]
    assert two.startswith("# commsim collective: all_reduce, 2 nodes x 8 GPUs, nominal dgx-h100"), two


def test_validate_header():
    assert report_head("s", 1, 1, "c.yaml") == "# s: 1 rank, 1 step, calibration c.yaml"
    assert report_head("s", 2, 5, "c.yaml") == "# s: 2 ranks, 5 steps, calibration c.yaml"
    assert report_head("s", 8, 1, "c.yaml", hosts=1) == "# s: 8 ranks on 1 host, 1 step, calibration c.yaml"
    assert report_head("s", 16, 3, "c.yaml", hosts=2) == "# s: 16 ranks on 2 hosts, 3 steps, calibration c.yaml"


def test_lab_headers():
    assert calibrate_head(1, 1, "x", 8, 64, 1).startswith("# commsim lab calibrate: 1 node x 1 rank of lab x, ")
    assert calibrate_head(1, 1, "x", 8, 64, 1).endswith(", 1 iteration")
    assert calibrate_head(2, 3, "x", 8, 64, 5) == ("# commsim lab calibrate: 2 nodes x 3 ranks of lab x, "
                                                   "all_reduce 8..64 B, 5 iterations")
    one = SimpleNamespace(name="s", steps=1, cluster=SimpleNamespace(nodes=1, gpus_per_node=2))
    assert validate_head(one, "c.yaml") == "# s: 1 lab node x 2, 1 step, calibration c.yaml"
    two = SimpleNamespace(name="s", steps=4, cluster=SimpleNamespace(nodes=2, gpus_per_node=1))
    assert validate_head(two, "c.yaml") == "# s: 2 lab nodes x 1, 4 steps, calibration c.yaml"
