"""The physical system description: validation, derived quantities, presets' provenance."""

from dataclasses import replace

import pytest

from commsim.errors import InputError
from commsim.network.system import ACHIEVABLE_FRACTION, PRESETS, SwitchTier, System, nominal_system, preset


def _sys(**kw) -> System:
    base = dict(name="t", gpu_arch="hopper", gpus_per_node=8, intra_kind="nvswitch", intra_bw_GBps=360.0,
                intra_hop_us=3.4, nics_per_node=8, nic_bw_GBps=47.5, net_hop_us=14.0)
    base.update(kw)
    return System(**base)


def test_nominal_bandwidths_are_line_rate_times_achievable_fraction():
    s = nominal_system("x", "ampere", 4, "nvlink", 300.0, 2, 200.0, source="spec")
    assert s.intra_bw_GBps == pytest.approx(300.0 * ACHIEVABLE_FRACTION["nvlink"])
    assert s.nic_bw_GBps == pytest.approx(200.0 / 8 * ACHIEVABLE_FRACTION["rdma"])
    assert s.sources["nic_bw_GBps"].startswith("nominal: spec")


def test_every_preset_names_a_source_for_every_constant():
    for name, s in PRESETS.items():
        for k in System.FIT_NAMES:
            assert s.sources.get(k, "").startswith("nominal"), (name, k)


def test_nics_used_follows_rails():
    s = _sys(nics_per_node=8)
    assert [s.nics_used(g) for g in (1, 2, 4, 8)] == [1, 2, 4, 8]
    polaris = preset("polaris")  # 2 NICs for 4 GPUs
    assert [polaris.nics_used(g) for g in (1, 2, 3, 4)] == [1, 1, 2, 2]
    assert replace(s, rails=False).nics_used(1) == 8


def test_fabric_factor_and_tier_latency():
    s = _sys(tiers=(SwitchTier(nodes_below=16, oversubscription=2.0, latency_us=1.0),))
    assert s.fabric_factor(16) == 1.0
    assert s.fabric_factor(17) == 0.5
    assert s.net_hop_latency_us(16) == 14.0
    # 64 nodes over 4 leaves: 4 of 64 ring hops cross the spine, each crossing up and down
    assert s.net_hop_latency_us(64) == pytest.approx(14.0 + 1.0 * 2 * 4 / 64)


def test_domains_for_a_multi_node_nvlink_domain():
    gb = preset("gb200-nvl72")
    assert gb.domains(16) == 1 and gb.domains(18) == 1 and gb.domains(19) == 2 and gb.domains(48) == 3


@pytest.mark.parametrize("kw, key", [
    (dict(gpu_arch="kepler"), "gpu_arch"),
    (dict(intra_kind="infinityfabric"), "intra_kind"),
    (dict(nic_bw_GBps=0.0), "nic_bw_GBps"),
    (dict(gpus_per_node=0), "gpus_per_node"),
    (dict(intra_kind="nvlink", nvls=True), "nvls"),
    # every NCCL table is picked by the release: these raised ValueError / IndexError mid-price
    (dict(nccl_version="abc"), "nccl_version"),
    (dict(nccl_version="2"), "nccl_version"),
    (dict(nccl_version="2.x"), "nccl_version"),
    (dict(nccl_version="2.\u0662\u0661"), "nccl_version"),  # Arabic-Indic digits
    (dict(nccl_version=2.21), "nccl_version"),
])
def test_bad_values_name_their_key(kw, key):
    with pytest.raises(InputError) as e:
        _sys(**kw)
    assert e.value.path == key


@pytest.mark.parametrize("version", ["2.18", "2.27.3", "2.4", "2.30"])
def test_a_release_with_or_without_its_patch_is_a_version(version):
    assert _sys(nccl_version=version).nccl_version == version


def test_check_scale_and_unknown_preset():
    s = _sys()
    with pytest.raises(InputError, match="gpus_per_node"):
        s.check_scale(2, 9)
    with pytest.raises(InputError, match="at least 2 ranks"):
        s.check_scale(1, 1)
    with pytest.raises(InputError) as e:
        preset("dgx-z900")
    assert e.value.path == "preset"


def test_with_constants_marks_the_source_and_refuses_unknown_names():
    s = _sys().with_constants({"nic_bw_GBps": 40.0}, "fit: a.log")
    assert s.nic_bw_GBps == 40.0 and s.sources["nic_bw_GBps"] == "fit: a.log"
    with pytest.raises(InputError):
        _sys().with_constants({"gpus_per_node": 4}, "x")


def test_system_from_dict_reads_back_every_preset_and_refuses_bad_keys():
    from commsim.network.system import PRESETS, system_from_dict

    for name, s in PRESETS.items():
        assert system_from_dict(s.describe(), "f.yaml") == s
        assert system_from_dict(s.describe(), "f.yaml").sources == s.sources
    assert system_from_dict("p5", "f.yaml") == PRESETS["p5"]
    doc = PRESETS["p5"].describe()
    for edit, key in ((dict(bogus=1), "system.bogus"), (dict(nvls="yes"), "system.nvls"),
                      (dict(nic_bw_GBps="fast"), "system.nic_bw_GBps"), (dict(intra_kind="pci"), "system.intra_kind"),
                      (dict(nic_line_GBps="wire"), "system.nic_line_GBps"), (dict(intra_line_GBps=-1.0), "system.intra_line_GBps")):
        with pytest.raises(InputError, match=f"f.yaml: {key}"):
            system_from_dict({**doc, **edit}, "f.yaml")
    with pytest.raises(InputError, match="system.name: missing key"):
        system_from_dict({k: v for k, v in doc.items() if k != "name"}, "f.yaml")


def test_presets_carry_their_line_rates_and_achieve_less():
    from commsim.network.system import PRESETS

    for name, s in PRESETS.items():
        assert s.line_rate_GBps("intra_bw_GBps") == s.intra_line_GBps and s.intra_bw_GBps < s.intra_line_GBps, name
        assert s.line_rate_GBps("nic_bw_GBps") == s.nic_line_GBps and s.nic_bw_GBps < s.nic_line_GBps, name
        assert s.line_rate_GBps("launch_us") is None
    assert PRESETS["hgx-h100-4gpu"].nic_line_GBps == 25.0      # 200 Gb/s NDR200
    assert PRESETS["dgx-h100"].intra_line_GBps == 450.0        # NVLink4, each way


# --- DGX-1's hybrid cube-mesh: a job gets the NVLinks among its GPUs -------------------------

def test_dgx1_mesh_is_the_white_papers_cube_mesh():
    from commsim.network.system import DGX1V_NVLINKS

    assert all(sum(row) == 6 for row in DGX1V_NVLINKS)  # six NVLink2 links per V100
    assert all(DGX1V_NVLINKS[i][j] == DGX1V_NVLINKS[j][i] for i in range(8) for j in range(8))
    assert all(DGX1V_NVLINKS[i][i] == 0 for i in range(8))
    quads = [sum(1 for j in range(4) if DGX1V_NVLINKS[i][j]) for i in range(4)]
    assert quads == [3, 3, 3, 3]  # GPUs 0-3 fully connected


def test_dgx1_ring_links_per_gpu_count():
    from commsim.network.system import DGX1V_NVLINKS, ring_links

    # 2 GPUs share 1 link; GPUs 0-3 close two link-disjoint cycles (4 of the 5 links GPU 2 has
    # into the set); the whole node three (all 6); GPU 4's only link into 0..4 is to GPU 0
    assert {g: ring_links(DGX1V_NVLINKS, g) for g in range(1, 9)} == {1: 0, 2: 1, 3: 2, 4: 4, 5: 0, 6: 2, 7: 4, 8: 6}


def test_ring_links_against_small_meshes():
    from commsim.network.system import ring_links

    full4 = tuple(tuple(0 if i == j else 1 for j in range(4)) for i in range(4))
    assert ring_links(full4, 4) == 2          # any two of K4's 3 cycles share a pair: 2 of 3 links driven
    double4 = tuple(tuple(0 if i == j else 2 for j in range(4)) for i in range(4))
    assert ring_links(double4, 4) == 6        # 3 cycles x 2 links each pair: every link driven
    line = ((0, 1, 0), (1, 0, 1), (0, 1, 0))  # a path closes no ring
    assert ring_links(line, 3) == 0


def test_job_intra_bandwidth_on_dgx1_and_nvswitch():
    from commsim.network.system import job_intra_bw_GBps

    dgx1 = PRESETS["dgx1-v100"]
    per_link = dgx1.intra_bw_GBps / 6
    assert {g: job_intra_bw_GBps(dgx1, g) for g in (2, 4, 8)} == pytest.approx(
        {2: per_link, 4: 4 * per_link, 8: 6 * per_link})
    assert job_intra_bw_GBps(dgx1, 8) == dgx1.intra_bw_GBps == pytest.approx(150 * ACHIEVABLE_FRACTION["nvlink"])
    a100 = PRESETS["dgx-a100"]
    assert job_intra_bw_GBps(a100, 2) == job_intra_bw_GBps(a100, 8) == a100.intra_bw_GBps
    with pytest.raises(InputError, match="gpus_per_node"):
        job_intra_bw_GBps(dgx1, 5)


def test_nvlinks_per_gpu_from_the_line_rate():
    from commsim.network.system import preset as _preset
    assert _preset("dgx-h100").nvlinks_per_gpu() == 18
    assert _preset("dgx-a100").nvlinks_per_gpu() == 12
    assert _preset("gb200-nvl72").nvlinks_per_gpu() == 18      # NVLink5: 50 GB/s a link each way
    assert _preset("dgx1-v100").nvlinks_per_gpu() == 6
    assert _preset("g4dn-t4").nvlinks_per_gpu() is None        # PCIe


def test_nic_reported_latency_is_read_back_and_checked():
    from commsim.errors import InputError
    from commsim.network.system import preset as _preset, system_from_dict
    p5 = _preset("p5")
    assert p5.nic_reported_latency_us == 75.0 and _preset("dgx-h100").nic_reported_latency_us == 0.0
    assert system_from_dict(p5.describe(), "cal.yaml").nic_reported_latency_us == 75.0
    doc = dict(p5.describe(), nic_reported_latency_us=-1.0)
    with pytest.raises(InputError) as e:
        system_from_dict(doc, "cal.yaml", "physical.nominal_system")
    assert e.value.path == "physical.nominal_system.nic_reported_latency_us"


@pytest.mark.parametrize("tier, key", [
    ({"nodes_below": float("inf")}, "nodes_below"),  # int(inf): an OverflowError, a traceback
    ({"nodes_below": 2.7}, "nodes_below"),  # int() truncated it to 2
    ({"nodes_below": True}, "nodes_below"),
    ({"nodes_below": "2"}, "nodes_below"),
    ({"nodes_below": 2, "oversubscription": float("nan")}, "oversubscription"),  # passed `< 1.0`
    ({"nodes_below": 2, "oversubscription": float("inf")}, "oversubscription"),
    ({"nodes_below": 2, "latency_us": float("inf")}, "latency_us"),
    ({"nodes_below": 2, "latency_us": float("nan")}, "latency_us"),
    ({"nodes_below": 2, "latency_us": "1"}, "latency_us"),
])
def test_system_from_dict_refuses_a_bad_switch_tier_at_its_field(tier, key):
    from commsim.network.system import system_from_dict

    doc = dict(PRESETS["p5"].describe(), tiers=[tier])
    with pytest.raises(InputError) as e:
        system_from_dict(doc, "cal.yaml", "physical.nominal_system")
    assert e.value.path == f"physical.nominal_system.tiers[0].{key}"
    tiers = system_from_dict(dict(doc, tiers=[{"nodes_below": 16, "oversubscription": 2, "latency_us": 1}]), "cal.yaml").tiers
    assert tiers == (SwitchTier(16, 2.0, 1.0),)


def test_a_switch_tier_with_nan_or_inf_is_refused_by_the_record_too():
    for tier in (SwitchTier(2, float("nan")), SwitchTier(2, 1.0, float("inf"))):
        with pytest.raises(InputError, match="tiers"):
            _sys(tiers=(tier,))


def test_with_fields_changes_the_description_and_marks_where_it_came_from():
    from commsim.errors import InputError
    from commsim.network.system import preset, with_fields

    base = preset("dgx-h100", "t")
    w = with_fields(base, {"nics_per_node": 4, "tiers": [{"nodes_below": 32, "oversubscription": 2}]}, "--with")
    assert (w.nics_per_node, w.tiers[0].nodes_below, w.tiers[0].oversubscription) == (4, 32, 2.0)
    assert w.sources["nics_per_node"] == "--with" and w.sources["intra_bw_GBps"] == base.sources["intra_bw_GBps"]
    assert with_fields(base, {}, "--with") == base
    for bad, key in (({"name": "x"}, "name"), ({"sources": {}}, "sources"), ({"nics": 4}, "nics"),
                     ({"nic_bw_GBps": -1}, "nic_bw_GBps"), ({"tiers": [{"nodes_below": 2.5}]}, "tiers[0].nodes_below")):
        with pytest.raises(InputError) as err:
            with_fields(base, bad, "--with")
        assert err.value.path == key and str(err.value).startswith(f"--with: {key}: ")
