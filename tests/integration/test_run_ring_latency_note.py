"""`run`'s note when the alpha-beta ring's per-hop latencies are most of its all-reduce time
(commsim.analysis.report.ring_latency_share): at 16,384 ranks the default ring predicted 12 s
steps with nothing said of why, where a tree or NCCL's choice takes 0.4 s."""

from commsim.cli.main import run_cli


def scenario(tmp_path, gpus=8, cap="64 KiB"):
    path = tmp_path / "ring.yaml"
    path.write_text(f"""name: ring
steps: 2
cluster:
  nodes: 1
  gpus_per_node: {gpus}
  intra_node: {{bandwidth: 100 GB/s, latency: 5 us}}
  inter_node: {{bandwidth: 10 GB/s, latency: 10 us}}
model: {{parameters: 1e6, grad_dtype: fp32}}
compute: {{forward: 1 ms, backward: 2 ms}}
ddp: {{bucket_cap: {cap}, first_bucket: {cap}}}
""")
    return path


def test_run_notes_a_latency_bound_ring_and_not_a_bandwidth_bound_one(tmp_path, capsys):
    assert run_cli(["run", str(scenario(tmp_path))]) == 0  # 64 KiB buckets on 8 ranks: latency
    out = " ".join(capsys.readouterr().out.split())
    assert "note: the ring's 2(n-1) = 14 per-hop latencies are" in out and "at 8 ranks" in out
    assert run_cli(["run", str(scenario(tmp_path, gpus=2, cap="100 MB"))]) == 0  # one 4 MB bucket on 2: 20%
    assert "per-hop latencies" not in capsys.readouterr().out
