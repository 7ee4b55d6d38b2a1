"""DGX B200 from its datasheet alone: what NCCL runs on it and where its price is bounded.

No published nccl-tests log of a DGX B200 is among the benchmark's, so these check the
structure the description implies (NVLink5 links, NVLS on the node, the 8 NICs across nodes),
not a measured figure."""

import numpy as np

from commsim.collectives.nccl.graph import nics_driven
from commsim.collectives.nccl.scale import Scale
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import PRESETS

GB = 2 ** 30


def test_the_datasheet_node():
    s = PRESETS["dgx-b200"]
    assert (s.gpu_arch, s.gpus_per_node, s.intra_kind, s.nvls) == ("blackwell", 8, "nvswitch", True)
    assert s.nvlinks_per_gpu() == 18                     # NVLink5, 50 GB/s a link each way
    assert (s.nics_per_node, s.nic_line_GBps, s.intra_line_GBps) == (8, 50.0, 900.0)
    assert s.nvlink_domain_nodes == 1                    # one NVLink domain per node, unlike NVL72


def test_one_node_runs_nvls_at_large_sizes_and_stays_under_the_links():
    p = plan("all_reduce", PRESETS["dgx-b200"], 1, 8)
    sizes = np.array([256 << 20, GB, 16 * GB], dtype=float)
    assert {a for a, _ in p.choose(sizes)} == {"nvls"}
    algbw = sizes / (p.time_us(sizes) * 1e3)
    # NVLS sends each byte into the switch once and reads the sum back once: algbw is bounded by
    # one GPU's NVLink rate each way, and it grows with size toward it
    assert np.all(algbw < PRESETS["dgx-b200"].intra_line_GBps)
    assert np.all(np.diff(algbw) > 0)


def test_across_nodes_every_nic_carries_a_channel_and_the_network_bounds_the_tree():
    s = PRESETS["dgx-b200"]
    assert nics_driven(s, Scale.of(s, 16, 8)) == 8
    p = plan("all_reduce", s, 16, 8)
    size = np.array([16.0 * GB])
    assert p.choose(size)[0][0] in ("nvls_tree", "tree", "ring")
    algbw = float(size[0] / (p.time_us(size)[0] * 1e3))
    # each node sends at least 2(n-1)/n of every byte across the network (a ring; a tree past 2
    # nodes sends 2), so algbw is bounded by the node's NICs at line rate over that
    assert algbw <= s.nics_per_node * s.nic_line_GBps / (2 * 15 / 16)
    one_node = plan("all_reduce", s, 1, 8)
    assert algbw < float(size[0] / (one_node.time_us(size)[0] * 1e3))  # NVLink outruns 8 NICs
