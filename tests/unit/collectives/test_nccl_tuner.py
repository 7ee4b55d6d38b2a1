"""NCCL-structured cost model: closed forms per algorithm, NCCL's choice, overrides, errors."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commsim.collectives.nccl.estimate import nccl_estimate_us
from commsim.collectives.nccl.graph import nccl_channels, nics_driven
from commsim.collectives.nccl.nvls import nvls_tree_nics
from commsim.collectives.nccl.physical import channels_used, physical_time_us
from commsim.collectives.nccl.runnable import parse_selection
from commsim.collectives.nccl.scale import ALGORITHMS, KINDS, PROTOCOLS, Scale
from commsim.collectives.nccl_tuner import plan
from commsim.errors import InputError
from commsim.network.system import System, preset


def _sys(**kw) -> System:
    base = dict(name="t", gpu_arch="hopper", gpus_per_node=8, intra_kind="nvswitch", intra_bw_GBps=360.0,
                intra_hop_us=3.0, nics_per_node=8, nic_bw_GBps=50.0, net_hop_us=10.0, launch_us=5.0,
                simple_ch_GBps=1000.0, ll128_ch_GBps=1000.0, ll_ch_GBps=1000.0, intra_channels=16,
                cpu_vendor="intel", net_simple_base_us=7.0)
    base.update(kw)
    return System(**base)


def test_ring_all_reduce_one_node_closed_form():
    s = _sys()
    sc = Scale.of(s, 1, 8)
    S = 1 << 30
    t = physical_time_us("all_reduce", "ring", "Simple", [S], s, sc)[0]
    lat = 8.4 + 5.0 + 2 * 7 * 3.0          # baseLat[Ring][Simple] + launch + 2(n-1) NVLink hops
    bw = 360.0 / (2 * 7 / 8)               # algbw = busbw / (2(n-1)/n)
    assert t == pytest.approx(lat + S / (1000 * bw))


def test_ring_across_nodes_is_paced_by_the_nics_in_use_and_counts_network_steps():
    s = _sys()
    sc = Scale.of(s, 4, 2)              # 8 ranks, 2 NICs per node in use
    S = 1 << 30
    t = physical_time_us("all_gather", "ring", "Simple", [S], s, sc)[0]
    n, D = 8, 4
    steps, inter = n - 1, D - 1
    lat = 8.4 + 5.0 + (steps - inter) * max(3.0, 3 * 1.0) + inter * 10.0  # Intel net overhead x3 for Simple
    lat += 7.0                             # Simple across the network: net_simple_base_us, once
    # 8 loops of 8 channels x 8 ranks x 2 MiB: 7 loop boundaries, two 1 MiB slices each at simple_ch
    bubble = 7 * 2 * (1 << 20) / (1000 * 1000.0)
    bw = 2 * 50.0 / ((n - 1) / n)
    assert t == pytest.approx(lat + bubble + S / (1000 * bw))


def test_tree_at_two_nodes_moves_each_node_s_once_and_beats_the_nic_rate():
    s = _sys(tree_efficiency=1.0, nics_per_node=2)  # network-limited: 2 x 50 GB/s per node
    sc = Scale.of(s, 2, 8)
    S = float(1 << 34)  # past the tree correction table
    t = physical_time_us("all_reduce", "tree", "Simple", [S], s, sc)[0]
    alg = min(360.0 / 2, 2 * 50.0 / 1.0)   # intra chain 2S/B, network S/(k B)
    lat = 8.4 + 5.0 + 2 * (7 * 3.0 * 4.0 / 3.4 + 1 * 10.0)  # tree hop ratios 4.0/3.4 (NVLink), 14/14 (NET)
    lat += 7.0                              # net_simple_base_us
    assert t == pytest.approx(lat + S / (1000 * alg))
    busbw = S / (t * 1e3) * 2 * 15 / 16
    assert busbw > 2 * 50.0 * 1.5  # above the node's NIC aggregate, which no ring can do
    ring = physical_time_us("all_reduce", "ring", "Simple", [S], s, sc)[0]
    assert S / (ring * 1e3) * 2 * 15 / 16 <= 2 * 50.0
    # 3 nodes: 2S per node through the NICs, the 2-node advantage is gone
    sc3 = Scale.of(s, 3, 8)
    t3 = physical_time_us("all_reduce", "tree", "Simple", [S], s, sc3)[0]
    lat3 = 8.4 + 5.0 + 2 * (7 * 3.0 * 4.0 / 3.4 + 2 * 10.0) + 7.0  # the btree over 3 nodes is 2 hops deep
    assert t3 == pytest.approx(lat3 + S / (1000 * (2 * 50.0 / 2.0)))


def test_nvls_tree_across_nvlink_domains_crosses_the_network_through_one_nic_per_channel():
    """A multi-host NVLink domain (NVL72-like: 16 hosts x 4 GPUs, 64 NICs): the ring search finds
    21 channels of 48 GB/s (a GPU's 1000 GB/s over the 63/64 of channels that cross it), doubled
    to 42 that run; NVLS tree sends its inter-domain traffic through its NVLS heads' NICs, one per
    head (search.cc getNvlsNetDev): min(NCCL_MAX_NVLS_ARITY 32, 64 GPU:NIC pairs) = 32, not the
    ring's 21 nor all 64."""
    s = _sys(gpus_per_node=4, nics_per_node=4, nvls=True, nvlink_domain_nodes=16, intra_bw_GBps=1000.0,
             nvls_efficiency=1.0, tree_efficiency=1.0)
    sc = Scale.of(s, 48, 4)
    assert (sc.domains, sc.nics, nccl_channels(s, sc), nics_driven(s, sc)) == (3, 64, 42, 21)
    S = float(1 << 34)
    t = physical_time_us("all_reduce", "nvls_tree", "Simple", [S], s, sc)[0]
    lat = 0.0 + 5.0 + 3.0 * 25 / 3.4 + 2 * 2 * 10.0 * 20.9 / 14.0  # launch, NVLS hop, 2h net hops (3 nodes: h = 2)
    lat += 7.0                                                      # net_simple_base_us: NVLS tree is Simple
    assert nvls_tree_nics(s, sc) == 32
    alg = 32 * 50.0 / 2.0                                          # D > 2: 2S per domain through 32 heads' NICs
    # one loop (16 NVLS channels x 32 heads x 128 KiB) through 4 hops of half a head's channels; in the
    # node, scatter and gather a loop each and 2h + 1 = 5 chunk stages of 1/32 loop at the heads
    loop = 16 * 32 * 128 * 1024.0
    fill = 4 * loop / 64 / (1000 * 50.0) + (2 + 5 / 32) * loop / (1000 * 1000.0) - loop / (1000 * alg)
    assert t == pytest.approx(lat + fill + S / (1000 * alg))


def test_protocol_payload_fractions_scale_bandwidth():
    s = _sys()
    sc = Scale.of(s, 1, 8)
    S = np.array([float(1 << 32)])
    t = {p: physical_time_us("all_reduce", "ring", p, S, s, sc)[0] for p in PROTOCOLS}
    lat = {p: physical_time_us("all_reduce", "ring", p, np.array([1e-9]), s, sc)[0] for p in PROTOCOLS}
    bw = {p: S[0] / (1000 * (t[p] - lat[p])) for p in PROTOCOLS}
    assert bw["LL"] / bw["Simple"] == pytest.approx(0.5, rel=1e-6)
    assert bw["LL128"] / bw["Simple"] == pytest.approx(120 / 128, rel=1e-6)


def test_small_sizes_use_fewer_channels_and_fewer_nics():
    # enqueue.cc: Simple needs 512 threads x 64 bytes = 32 KiB per channel
    nc = channels_used("ring", "Simple", [16 << 10, 64 << 10, 1 << 20], 16, 8)
    assert nc.tolist() == [1.0, 2.0, 16.0]
    s = _sys(simple_ch_GBps=1e6)
    sc = Scale.of(s, 2, 8)
    S = np.array([64.0 * 1024])
    t2 = physical_time_us("all_gather", "ring", "Simple", S, s, sc)[0]
    lat = physical_time_us("all_gather", "ring", "Simple", np.array([1e-9]), s, sc)[0]
    bw = S[0] / (1000 * (t2 - lat))
    assert bw == pytest.approx(2 * 50.0 / (15 / 16))  # two channels drive two NICs


def test_nvls_needs_nvswitch_and_is_an_error_naming_the_key():
    s = _sys(intra_kind="nvlink")
    with pytest.raises(InputError) as e:
        plan("all_reduce", s, 1, 8, algorithm="nvls")
    assert e.value.path == "algorithm" and "NVSwitch" in str(e.value)
    with pytest.raises(InputError) as e:
        plan("all_reduce", _sys(), 2, 8, algorithm="collnet_direct")
    assert "SHARP" in str(e.value)
    with pytest.raises(InputError) as e:
        plan("all_reduce", _sys(), 1, 8, protocol="LL256")
    assert e.value.path == "protocol"


def test_selection_syntax_like_nccl_algo_and_proto():
    names = ALGORITHMS
    assert parse_selection("Ring,TREE", names, "algorithm", "x") == ("tree", "ring")
    assert "ring" not in parse_selection("^ring", names, "algorithm", "x")
    assert parse_selection(None, PROTOCOLS, "protocol", "x") == PROTOCOLS
    p = plan("all_reduce", _sys(), 2, 8, algorithm="ring", protocol="Simple")
    assert p.candidates == (("ring", "Simple"),)


def test_nccl_estimate_reproduces_tuning_cc_ring_latency():
    # one node, 8 NVLink GPUs, ring LL (2.30): baseLat 6.6 + 2(n-1) x hwLat[NVLINK][Ring][LL] 0.6
    s = _sys()
    sc = Scale.of(s, 1, 8)
    t = nccl_estimate_us("all_reduce", "ring", "LL", [8.0], s, sc)[0]
    C = s.intra_channels
    bus = min(141.0, C * (360.0 / C) * 0.5)  # llMaxBws[Hopper][N1], Ring/LL x .5
    alg = bus * 8 / 14
    assert t == pytest.approx(6.6 + 14 * 0.6 + 8.0 / (1000 * alg))


def test_nccl_picks_tree_on_two_nodes_and_ring_on_many_for_large_sizes():
    s = replace(preset("hgx-h100-4gpu"), nccl_version="2.22")
    big = [float(1 << 33)]
    assert plan("all_reduce", s, 2, 4).choose(big)[0][0] == "tree"
    assert plan("all_reduce", s, 16, 4).choose(big)[0][0] == "ring"
    # small messages: a low-latency protocol
    assert plan("all_reduce", s, 16, 4).choose([1024.0])[0][1] in ("LL", "LL128")


def test_pcie_without_nvlink_has_no_ll128_and_no_halving_doubling():
    s = preset("g4dn-t4")
    p = plan("all_reduce", s, 1, 8)
    assert all(proto != "LL128" for _, proto in p.candidates)
    assert {a for a, _ in p.candidates} <= {"ring", "tree"}


def test_plan_time_is_the_physical_time_of_the_chosen_pair_and_finish_times_are_a_barrier():
    s = _sys()
    p = plan("all_reduce", s, 2, 8)
    S = np.array([1e3, 1e6, 1e9])
    chosen = p.choose(S)
    direct = [physical_time_us("all_reduce", a, pr, [x], s, p.scale)[0] for (a, pr), x in zip(chosen, S)]
    assert p.time_us(S) == pytest.approx(direct)
    f = p.finish_times([0.0, 1e-3, 2e-3], 1e6)
    assert f.tolist() == pytest.approx([2e-3 + direct[1] * 1e-6] * 3)


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 64), g=st.sampled_from([1, 2, 4, 8]), exp=st.integers(3, 33),
       kind=st.sampled_from(KINDS))
def test_time_grows_with_size_and_busbw_never_beats_the_links(nodes, g, exp, kind):
    s = preset("dgx-h100")
    if nodes * g < 2:
        return
    # NCCL's own pick (by its a-priori estimate) may be slower than the fastest pair, never faster.
    fastest = plan(kind, s, nodes, g, pick="fastest")
    p = plan(kind, s, nodes, g)
    S = np.array([2.0 ** exp, 2.0 ** (exp + 1)])
    tf = fastest.time_us(S)
    assert np.all(tf > 0)
    assert np.all(p.time_us(S) >= tf * (1 - 1e-12))
    # Doubling the size at most halves the time: while NCCL adds channels with size (enqueue.cc)
    # the bytes per channel can drop, so time may dip, but never by more than the channel step;
    # once every channel is in use, time grows with size.
    assert tf[1] >= 0.5 * tf[0]
    full = 2.0 ** exp >= nccl_channels(s, Scale.of(s, nodes, g)) * 512 * 8 * nodes * g
    if full:
        assert tf[1] >= tf[0]
    bus = p.busbw_GBps(S)
    # bounds: a ring is paced by min(NVLink, NICs); the 2-node tree and NVLS by at most 2x that
    limit = 2.0 * max(s.intra_bw_GBps, 1.0)
    assert np.all(bus <= limit * 1.0001)
    if nodes > 2 and kind != "all_reduce":
        assert np.all(bus <= g * s.nic_bw_GBps * 1.0001 + 1e-9)


# --- the registry entry "nccl": the physical model as a kernel ---------------------------------

from commsim.collectives.kernels import make_kernel as _make_kernel  # noqa: E402
from commsim.network.fabric import Fabric as _Fabric  # noqa: E402
from commsim.network.system import SystemFabric, system_of_fabric, with_system  # noqa: E402
from commsim.collectives.kernels import REGISTRY as _REGISTRY  # noqa: E402

REGISTRY_NCCL = _REGISTRY["nccl"]


def _fabric(**kw):
    base = dict(nodes=4, gpus_per_node=8, intra_latency=3.4e-6, intra_bandwidth=360e9,
                inter_latency=14e-6, inter_bandwidth=8 * 47.5e9, nics_per_node=8)
    base.update(kw)
    return _Fabric(**base)


def test_nccl_kernel_is_the_plan_of_the_fabrics_system_and_a_barrier():
    f = _fabric()
    sysf = system_of_fabric(f)
    assert (sysf.nics_per_node, sysf.nic_bw_GBps, sysf.intra_bw_GBps) == (8, 47.5, 360.0)
    launch = np.linspace(0, 1e-4, f.world_size)
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        for size in (1 << 12, 1 << 22, 1 << 30):
            k = _make_kernel("nccl", f, size) if kind == "all_reduce" else REGISTRY_NCCL.plan(kind, f, size)
            want = plan(kind, sysf, 4, 8).time_us([size])[0] * 1e-6
            assert k.uniform_time() == pytest.approx(want, rel=1e-12)
            assert k.chosen == "nccl:" + "/".join(plan(kind, sysf, 4, 8).choose([size])[0])
            np.testing.assert_array_equal(k.finish_times(launch), np.full(launch.shape, launch.max() + k.uniform_time()))


def test_nccl_kernel_uses_a_carried_system_and_its_overrides():
    f = _fabric()
    dgx = preset("dgx-h100")
    carried = with_system(f, dgx, nccl_algo="ring", nccl_proto="Simple")
    assert isinstance(carried.at_size(1 << 20), SystemFabric)  # per-size pricing keeps the system
    k = _make_kernel("nccl", carried, 1 << 20)
    assert k.chosen == "nccl:ring/Simple"
    assert k.uniform_time() == pytest.approx(
        plan("all_reduce", dgx, 4, 8, algorithm="ring", protocol="Simple").time_us([1 << 20])[0] * 1e-6, rel=1e-12)
    with pytest.raises(InputError, match="algorithm: nvls cannot run"):
        _make_kernel("nccl", with_system(f, dgx, nccl_algo="nvls"), 1 << 20)


def test_nccl_kernel_slow_link_slows_large_messages():
    f = _fabric()
    slow = f.with_slow_node(1, 0.25)
    big = 1 << 30
    assert _make_kernel("nccl", slow, big).uniform_time() > 2.5 * _make_kernel("nccl", f, big).uniform_time()
    assert _make_kernel("nccl", _fabric(nodes=1, gpus_per_node=1), big).uniform_time() == 0.0


@pytest.mark.parametrize("text", ["ring,", "ring,,tree", "^ll128,", ","])
def test_parse_selection_refuses_an_empty_item(text):
    # "ring," kept ring alone and "ring,,tree" both, the empty item dropped without a word.
    from commsim.errors import InputError

    with pytest.raises(InputError, match="without empty items"):
        parse_selection(text, ALGORITHMS, "collective.algorithm", "s.yaml")


def test_parse_selection_takes_nccls_own_spellings_and_one_caret():
    from commsim.errors import InputError

    # NCCL_ALGO=NVLSTree / CollnetDirect were unknown names
    assert parse_selection("NVLSTree,CollnetDirect", ALGORITHMS, "algorithm", "x") == ("collnet_direct", "nvls_tree")
    assert parse_selection("^nvlstree", ALGORITHMS, "algorithm", "x") == tuple(a for a in ALGORITHMS if a != "nvls_tree")
    # "^^ring" was read as "^ring"
    for text in ("^^ring", "^^^^tree"):
        with pytest.raises(InputError, match="one '\\^' at most"):
            parse_selection(text, ALGORITHMS, "algorithm", "x")
