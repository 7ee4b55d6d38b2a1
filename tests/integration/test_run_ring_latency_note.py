"""`run`'s note when the alpha-beta ring's per-hop latencies are most of its all-reduce time
(commsim.analysis.report.ring_latency_share): at 16,384 ranks the default ring predicted 12 s
steps with nothing said of why, where a tree or NCCL's choice takes 0.4 s."""

from commsim.cli.main import run_cli
from tests.conftest import write_ring_scenario as scenario


def test_run_notes_a_latency_bound_ring_and_not_a_bandwidth_bound_one(tmp_path, capsys):
    assert run_cli(["run", str(scenario(tmp_path))]) == 0  # 64 KiB buckets on 8 ranks: latency
    out = " ".join(capsys.readouterr().out.split())
    assert "note: the ring's 2(n-1) = 14 per-hop latencies are" in out and "at 8 ranks" in out
    assert run_cli(["run", str(scenario(tmp_path, gpus=2, cap="100 MB"))]) == 0  # one 4 MB bucket on 2: 20%
    assert "per-hop latencies" not in capsys.readouterr().out
