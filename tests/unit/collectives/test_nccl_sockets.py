"""NCCL's internal TCP socket transport (src/transport/net_socket.cc) and what NCCL's graphs see
of it (no GPUDirect RDMA: paths.cc diverts GPU-NIC traffic through the CPU)."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.estimate import nccl_estimate_us
from commsim.collectives.nccl.runnable import SOCKET_REPORTED_LATENCY_US, net_path_seen, runnable
from commsim.collectives.nccl.scale import LL, LL128, SIMPLE, Scale
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import preset

MB = 1 << 20


def _ll128_allowed(system, nodes, gpus, kind="all_reduce", algorithm="ring"):
    scale = Scale.of(system, nodes, gpus)
    return runnable(kind, algorithm, LL128, system, scale) is None


@pytest.mark.parametrize("path, seen", [("pix", "phb"), ("pxb", "phb"), ("pxn", "phb"), ("phb", "phb"), ("sys", "sys")])
def test_a_socket_transport_sees_its_nic_through_the_cpu(path, seen):
    sock = replace(preset("gh200-alps-socket"), nic_path=path)
    assert net_path_seen(sock) == seen
    # an RDMA transport keeps the board's path
    assert net_path_seen(replace(preset("gh200-alps"), nic_path=path)) == path


def test_no_ll128_across_nodes_over_sockets_even_on_a_pxb_hopper_board():
    rdma, sock = preset("gh200-alps"), preset("gh200-alps-socket")
    assert rdma.nic_path == sock.nic_path == "pxb"
    assert _ll128_allowed(rdma, 2, 4) and _ll128_allowed(rdma, 2, 4, algorithm="tree")
    assert not _ll128_allowed(sock, 2, 4)
    assert not _ll128_allowed(sock, 2, 4, algorithm="tree")
    why = runnable("all_reduce", "ring", LL128, sock, Scale.of(sock, 2, 4))
    assert "PHB" in why and "socket" in why
    # one node has no network path: LL128 over NVLink stays
    assert _ll128_allowed(sock, 1, 4)
    # and NCCL's pick never lands on it
    chosen = plan("all_reduce", sock, 2, 4).choose([2.0 ** k for k in range(3, 31)])
    assert all(p != LL128 for _, p in chosen)


def test_nccl_picks_for_sockets_as_for_an_rdma_nic_of_the_same_speed_and_path():
    # the socket transport reports the interface's line rate and latency 0, like NCCL's IB
    # transport: NCCL's estimate cannot tell the two apart (same path, same speed)
    sock = preset("polaris-socket")
    rdma = replace(preset("polaris"), nic_path=sock.nic_path)
    assert sock.nic_reported_latency_us == SOCKET_REPORTED_LATENCY_US
    sizes = np.array([2.0 ** k for k in range(3, 31)])
    for nodes in (2, 8, 128):
        scale = Scale.of(sock, nodes, 4)
        for a, p in (("ring", LL), ("ring", SIMPLE), ("tree", LL), ("tree", SIMPLE)):
            np.testing.assert_array_equal(nccl_estimate_us("all_reduce", a, p, sizes, sock, scale),
                                          nccl_estimate_us("all_reduce", a, p, sizes, rdma, scale))
