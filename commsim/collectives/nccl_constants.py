"""NCCL's internal cost-model constants, as numbers: the one copy in the package.

Transcribed from NCCL src/graph/tuning.cc (v2.19.3 and later), which holds the numeric tables of
NVIDIA/nccl src/graph/tuning.cc and src/graph/topo.h at tags v2.7.8-1 (033d7995), v2.19.3-1
(8c6c5951) and v2.30.7-1 (73cf1122). Units as in NCCL: latencies in microseconds, bandwidths
in GB/s.

Two views of the same numbers:

- :data:`NCCL_TABLES` ("2.18", "2.19", "2.20", "2.30"): every algorithm NCCL tunes (tree, ring, CollNet,
  NVLS, NVLS tree, PAT), four architecture rows (Volta, Ampere, Hopper, Blackwell), used by
  :mod:`commsim.collectives.nccl` (the physical model and NCCL's a-priori pick);
- :data:`VERSIONS` ("2.7", "2.19", "2.30"): Tree and Ring only, three architecture rows,
  used by :mod:`commsim.collectives.nccl_model` (``collective.model: nccl-X``). The 2.19 and
  2.30 entries are derived from :data:`NCCL_TABLES`; 2.7 (older layout) stands alone.

Index conventions: protocol order (LL, LL128, Simple); hardware NVLINK, PCI, NET;
node-count columns N1 (1 node), N2 (2), N4 (> 2).
"""

from __future__ import annotations

PROTOCOLS = ("LL", "LL128", "Simple")
LL, LL128, SIMPLE = PROTOCOLS
ALGORITHMS = ("Tree", "Ring")  # the algorithms of the VERSIONS view

def _table(base, hw, ll_max, ring_ll128, tree_ll128, tree, nvls_tree, nvls_eff, tree_corr, ring_ll_factor, pat):
    return dict(base=base, hw=hw, ll_max=ll_max, ring_ll128=ring_ll128, tree_ll128=tree_ll128, tree=tree,
                nvls_tree=nvls_tree, nvls_eff=nvls_eff, tree_corr=tree_corr, ring_ll_factor=ring_ll_factor, pat=pat)


_TREE_CORR_230 = {
    LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}

_TREE_CORR_219 = {
    LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}

# NCCL's a-priori constants, (LL, LL128, Simple) per entry, rows per architecture
# (Volta, Ampere, Hopper, Blackwell) x node columns (1, 2, >2 nodes). Latencies us, bandwidths
# GB/s. v2.30.7-1: src/graph/tuning.cc ncclTunerConstantsDefaults; v2.19.3-1: the same tables
# before the struct (baseLat, hwLat, llMaxBws, perChMax*), NVLS/PAT entries as in that tag.
NCCL_TABLES = {
    "2.30": _table(
        base={"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0, 0, 0),
              "collnet_chain": (0, 0, 0), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (8.0, 8.0, 8.0)},
        hw={
            "NVLINK": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0, 0, 3.7),
                       "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 25), "nvls_tree": (0, 0, 25), "pat": (0, 0, 4.0)},
            "PCI": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0, 0, 3.7),
                    "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (0, 0, 4.0)},
            "NET": {"tree": (5.0, 8.5, 14), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0, 0, 31),
                    "collnet_chain": (0, 0, 30), "nvls": (0, 0, 18), "nvls_tree": (0, 0, 20.9), "pat": (0, 0, 14)},
        },
        ll_max=((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0)),
        ring_ll128=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0)),
        tree_ll128=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0)),
        tree=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0)),
        nvls_tree=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0)),
        nvls_eff=(0.0, 0.0, 0.85, 0.74),
        tree_corr=_TREE_CORR_230,
        ring_ll_factor=0.5,   # "Ring/LL: busBw = min(llMaxBw, busBw * .5)"
        pat=True,
    ),
    "2.19": _table(
        base={"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0, 0, 0),
              "collnet_chain": (0, 0, 0), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (0, 0, 0)},
        hw={
            "NVLINK": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0, 0, 3.7),
                       "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 23), "nvls_tree": (0, 0, 23), "pat": (0, 0, 0)},
            "PCI": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0, 0, 3.7),
                    "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (0, 0, 0)},
            "NET": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0, 0, 31),
                    "collnet_chain": (0, 0, 30), "nvls": (0, 0, 18), "nvls_tree": (0, 0, 14), "pat": (0, 0, 0)},
        },
        ll_max=((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0)),
        ring_ll128=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (36.7, 36.7, 36.7)),
        tree_ll128=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (36.7, 36.7, 29.0)),
        tree=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (38.7, 41.4, 36.0)),
        nvls_tree=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (38.7, 41.4, 36.0)),
        nvls_eff=(0.0, 0.0, 0.85, 0.85),
        tree_corr=_TREE_CORR_219,
        ring_ll_factor=0.25,  # 2.19: "Ring/LL: busBw x 1/4 (nNodes>1 or AllReduce)"
        pat=False,
    ),
}


def _nccl_2_18(t219: dict) -> dict:
    """v2.18.3-1..v2.18.6-1 (src/graph/tuning.cc lines 56-77 of v2.18.5-1): the 2.19 tables
    except the latencies 2.19 changed. Tree/Simple hwLat was 4 (NVLink), 6 (PCI), 14 (NET)
    where 2.19-2.22 have 28 for all three, which makes 2.18 pick Tree/Simple at smaller
    sizes; CollNet and NVLS latencies were 2.18's own (baseLat CollNet 6.8/14/0, NVLS 23)."""
    hw = {k: dict(v) for k, v in t219["hw"].items()}
    hw["NVLINK"].update(tree=(0.6, 1.25, 4.0), collnet_direct=(0, 0, 8.0), collnet_chain=(0, 0, 4.75),
                        nvls=(0, 0, 0), nvls_tree=(0, 0, 0))
    hw["PCI"].update(tree=(1.0, 1.9, 6.0), collnet_direct=(0, 0, 8.0), collnet_chain=(0, 0, 8.0))
    hw["NET"].update(tree=(5.0, 8.5, 14.0), collnet_direct=(0, 0, 10.7), collnet_chain=(0, 0, 14.0),
                     nvls=(0, 0, 18.0), nvls_tree=(0, 0, 19.0))
    base = dict(t219["base"])
    base.update(collnet_direct=(6.8, 14.0, 0.0), collnet_chain=(6.8, 14.0, 0.0), nvls=(0, 0, 23.0), nvls_tree=(0, 0, 23.0))
    return dict(t219, base=base, hw=hw)


NCCL_TABLES["2.18"] = _nccl_2_18(NCCL_TABLES["2.19"])


def _nccl_2_20(t230: dict) -> dict:
    """v2.20.3-1..v2.22.3-1 (src/graph/tuning.cc baseLat/hwLat of v2.21.5-1, lines 56-78): the
    later tables except what 2.23 changed. Tree/Simple hwLat was 28 on NVLink, PCI and NET
    (2.23: 4, 4, 14) with baseLat Tree/Simple 0 (2.23: 8.4), NVLSTree NET 14 (later 20.9);
    treeCorrectionFactor had 23 entries (the same values); no PAT."""
    hw = {k: dict(v) for k, v in t230["hw"].items()}
    hw["NVLINK"].update(tree=(0.6, 1.25, 28.0))
    hw["PCI"].update(tree=(1.0, 1.9, 28.0))
    hw["NET"].update(tree=(5.0, 8.5, 28.0), nvls_tree=(0, 0, 14.0))
    base = dict(t230["base"], tree=(6.8, 14.0, 0.0))
    corr = {p: v[:23] for p, v in t230["tree_corr"].items()}
    return dict(t230, base=base, hw=hw, tree_corr=corr, pat=False)


NCCL_TABLES["2.20"] = _nccl_2_20(NCCL_TABLES["2.30"])

# The per-architecture ceilings of the Blackwell row (index 3) changed release by release where the
# Hopper rows did not, so each release line below is "2.30" with its own Blackwell row (tuning.cc
# llMaxBws / perChMaxRingLL128Bws / perChMaxTreeLL128Bws / perChMaxTreeBws / perChMaxNVLSTreeBws):
# - before v2.25 there is no Blackwell row: compCapIndex is ``minCompCap >= 90 ? HOPPER_COMPCAP_IDX``
#   (v2.23.4-1 line 146, v2.24.3-1 line 210), so Blackwell reads Hopper's;
# - v2.25.1-1 .. v2.27.7-1: twice Hopper's (``{2*36.7, 2*36.7, 2*36.7}``, ``{2*36.7, 2*36.7, 2*29.0}``,
#   ``{2*38.7, 2*41.4, 2*36.0}``); NVLS tree has no per-channel ceiling yet;
# - v2.28.3-1: ring LL128 still 2*36.7, tree LL128 {55.6, 31.67, 20.0}, tree {70.0, 42.8, 24.0},
#   NVLS tree {0.0, 96.0, 43.1}; v2.28.7-1: ring LL128 {2*36.7, 34.6, 2*36.7}; v2.28.9-1: NVLS
#   tree {0.0, 96.0, 43.8}; v2.29.2-1 / v2.29.3-1: ring LL128 {34.5, 34.6, 34.5}; v2.29.7-1: ring
#   LL128 {40.0, 40.0, 40.0}; v2.30.3-1 on: NVLS tree {0.0, 96.0, 80.0} (the "2.30" entry).
_BLACKWELL = 3


def _with_blackwell(t: dict, **rows) -> dict:
    """`t` with the Blackwell row of each named per-architecture table replaced by `rows`."""
    out = dict(t)
    for key, row in rows.items():
        out[key] = tuple(t[key][:_BLACKWELL]) + (tuple(row),)
    return out


def _blackwell_as_hopper(t: dict) -> dict:
    """`t` as a release without a Blackwell row reads it: Hopper's row (compCapIndex stops at Hopper)."""
    return _with_blackwell(t, **{k: t[k][_BLACKWELL - 1] for k in ("ll_max", "ring_ll128", "tree_ll128", "tree", "nvls_tree")})


NCCL_TABLES["2.23"] = _blackwell_as_hopper(NCCL_TABLES["2.30"])
NCCL_TABLES["2.25"] = _with_blackwell(NCCL_TABLES["2.30"], ring_ll128=(2 * 36.7, 2 * 36.7, 2 * 36.7),
                                      tree_ll128=(2 * 36.7, 2 * 36.7, 2 * 29.0), tree=(2 * 38.7, 2 * 41.4, 2 * 36.0))
NCCL_TABLES["2.28"] = _with_blackwell(NCCL_TABLES["2.30"], ring_ll128=(2 * 36.7, 2 * 36.7, 2 * 36.7),
                                      nvls_tree=(0.0, 96.0, 43.1))
NCCL_TABLES["2.28.7"] = _with_blackwell(NCCL_TABLES["2.30"], ring_ll128=(2 * 36.7, 34.6, 2 * 36.7),
                                        nvls_tree=(0.0, 96.0, 43.1))
NCCL_TABLES["2.28.9"] = _with_blackwell(NCCL_TABLES["2.30"], ring_ll128=(2 * 36.7, 34.6, 2 * 36.7),
                                        nvls_tree=(0.0, 96.0, 43.8))
NCCL_TABLES["2.29"] = _with_blackwell(NCCL_TABLES["2.30"], ring_ll128=(34.5, 34.6, 34.5), nvls_tree=(0.0, 96.0, 43.8))
NCCL_TABLES["2.29.7"] = _with_blackwell(NCCL_TABLES["2.30"], nvls_tree=(0.0, 96.0, 43.8))
# (release line, first version it covers), newest first: nccl.scale.nccl_table picks from 2.23 on
BLACKWELL_RELEASES = (("2.30", (2, 30, 0)), ("2.29.7", (2, 29, 7)), ("2.29", (2, 29, 0)), ("2.28.9", (2, 28, 9)),
                      ("2.28.7", (2, 28, 7)), ("2.28", (2, 28, 0)), ("2.25", (2, 25, 0)), ("2.23", (2, 23, 0)))

V2_7 = {
    "tag": "v2.7.8-1",
    "base_lat": {"Tree": (4.4, 4.4, 0.0), "Ring": (3.6, 10.0, 8.4)},
    "hw_lat": {
        "NVLINK": {"Tree": (0.52, 1.2, 28.0), "Ring": (0.47, 1.9, 3.4)},
        "PCI": {"Tree": (1.0, 1.9, 28.0), "Ring": (1.0, 2.5, 5.7)},
        "NET": {"Tree": (5.0, 8.5, 50.0), "Ring": (2.7, 4.0, 9.6)},
    },
    "ll128_max_bw_per_ch": {"all_gather": 18.3, "reduce_scatter": 15.2, "all_reduce": 16.7},
    "tree_correction": {
        "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),
        "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),
        "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
    },
}


# getNetOverhead (tuning.cc 2.19, 2.30): per network step, us, by CPU vendor; x3 for Simple.
NET_OVERHEAD_BY_CPU = {"intel": 1.0, "amd": 2.0, "arm": 1.0}
NET_OVERHEAD_US = {"Intel": 1.0, "AMD": 2.0, "other": 1.0}  # nccl_model's spelling of the same


def _model_view(table: dict, tag: str) -> dict:
    """The Tree/Ring, three-architecture view of a full table (nccl_model's layout)."""
    def rows(key):
        return tuple(table[key][:3])

    return {
        "tag": tag,
        "base_lat": {"Tree": table["base"]["tree"], "Ring": table["base"]["ring"]},
        "hw_lat": {hw: {"Tree": table["hw"][hw]["tree"], "Ring": table["hw"][hw]["ring"]}
                   for hw in ("NVLINK", "PCI", "NET")},
        # llMaxBws rows: the architecture on one node, the CPU vendor across nodes (row 0
        # Intel, row 1 AMD): the source labels them "Volta-N1 / Intel-N2 / Intel-N4", ...
        "ll_max_bws": rows("ll_max"),
        "per_ch_max_ring_ll128": rows("ring_ll128"),
        "per_ch_max_tree_ll128": rows("tree_ll128"),
        "per_ch_max_tree": rows("tree"),
        "tree_correction": {p: table["tree_corr"][p] for p in PROTOCOLS},
    }


V2_19 = _model_view(NCCL_TABLES["2.19"], "v2.19.3-1")
V2_30 = _model_view(NCCL_TABLES["2.30"], "v2.30.7-1")

VERSIONS = {"2.7": V2_7, "2.19": V2_19, "2.30": V2_30}


# --- the link speeds NCCL's topology code gives (what its search and tuning.cc see) ---------------
#
# src/graph/topo.h (v2.18.5-1 lines 16-26, v2.30.4-1 lines 18-34): per-NVLink speed by compute
# capability, GB/s. ncclTopoNVLinkBw picks by SM (v2.30.4-1 topo.h line 252: >= 100 SM100, >= 90 SM90,
# == 86 SM86, >= 80 SM80, >= 70 SM70, >= 60 SM60); topo.cc ncclTopoAddNvLinks (v2.30.4-1 lines 700-703)
# connects a GPU to the NVSwitch (or a peer) with ``count * nvlBw``, count = the NVLinks of the pair.
# SM90 was 20.0 up to 2.19 and 20.6 from v2.20.3-1; SM100 is new in v2.25.1-1 (40.0), 40.1 from
# v2.27.5-1; before 2.25 Blackwell took the SM90 value.
SM_NVLINK_BW = {"sm60": 18.0, "sm70": 20.0, "sm80": 20.0, "sm86": 12.0}
# topo.h PCI_BW (12 GB/s, "PCI Gen3 x16"): topo.cc ncclTopoAddPci reads the link instead,
# ``bw = width * speed / 80.0`` with kvDictPciGen speed per lane in 100 Mb/s (8 GT/s -> 60,
# 16 GT/s -> 120, 32 GT/s -> 240): 12 GB/s for Gen3 x16, 24 for Gen4 x16, 48 for Gen5 x16.
PCI_BW = 12.0
# NCCL's PCIe speed per lane and GT/s (kvDictPciGen 60 / 8 GT/s over 80) against the line rate per
# lane and GT/s (128b/130b encoding, 8 bits a byte): the factor from a PCIe line rate to NCCL's link.
PCI_BW_PER_LINE = (60.0 / 8.0 / 80.0) / (128.0 / 130.0 / 8.0)
# topo.cc ncclTopoAddNet (v2.18.5-1 line 338, v2.21.5-1 line 358, v2.27.7-1 line 370, v2.30.4-1 line
# 403): ``net->net.bw = mbps / 8000.0``: the NIC's reported line rate in GB/s (speed <= 0 -> 10 Gb/s).

# src/graph/search.cc speed arrays across nodes (ncclTopoCompute: the search starts at the first
# entry not above the GPU-NIC path's bandwidth, ``while (speedArray[speedIndex] > maxBw ...)
# speedIndex++``, v2.29.2-1 line 1101). Generic (pre-Hopper) array, unchanged 2.18-2.30:
SPEED_ARRAY_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
                     2.4, 1.2, 0.24, 0.12)
# sm90SpeedArrayInter (v2.19.3-1 .. v2.30.4-1; v2.18.5-1 lacked the 22.0 entry); Blackwell used it
# until 2.27 (v2.26.2-1's sm100SpeedArrayInter holds the same numbers).
SM90_SPEED_ARRAY_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                          2.4, 1.2, 0.24, 0.12)
SM90_SPEED_ARRAY_INTER_2_18 = tuple(s for s in SM90_SPEED_ARRAY_INTER if s != 22.0)
# sm100SpeedArrayInter by release: v2.27.3-1 starts at 47.9, v2.27.5-1 at 48.0 (45.1 for 45.0),
# v2.27.6-1 .. v2.29 add 96.0 in front, v2.30.4-1 adds 86.0 and 80.0 after it.
_SM100_TAIL = (42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SM100_SPEED_ARRAY_INTER = {
    "2.27.3": (47.9, 45.0) + _SM100_TAIL,
    "2.27.5": (48.0, 45.1) + _SM100_TAIL,
    "2.27.6": (96.0, 48.0, 45.1) + _SM100_TAIL,
    "2.30": (96.0, 86.0, 80.0, 48.0, 45.1) + _SM100_TAIL,
}

# src/graph/search.cc speed arrays inside one node (ncclTopoCompute picks them when the system has
# no NIC: ``speedArray = ccMin >= 100 ? sm100SpeedArrayIntra : (ccMin >= 90 ? sm90SpeedArrayIntra
# : speedArrayIntra)``, v2.30.4-1 line 1101; ccMin >= 100 is new in v2.25.1-1, Blackwell took the
# SM90 array before). speedArrayIntra is unchanged 2.18-2.30.
SPEED_ARRAY_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
# sm90SpeedArrayIntra: v2.18.5-1 line 812, v2.19.3-1 line 843 (adds 50.0, unchanged in 2.20),
# v2.21.5-1 on (adds 11.0, unchanged through v2.30.4-1 line 990).
SM90_SPEED_ARRAY_INTRA = {
    "2.18": (60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0),
    "2.19": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0),
    "2.21": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
}
# sm100SpeedArrayIntra: v2.25.1-1 line 940 (through 2.26), v2.27.3-1 line 912 (adds 18.0, through
# 2.28), v2.29.2-1 line 986 (adds 45.0, unchanged in v2.30.4-1 line 995).
SM100_SPEED_ARRAY_INTRA = {
    "2.25": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0),
    "2.27": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
    "2.29": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
# MAXCHANNELS (src/include/device.h): 32 up to v2.24.3-1, 64 from v2.25.1-1. The ring search looks
# for at most MAXCHANNELS/2 channels (init.cc ``ringGraph->maxChannels = MAXCHANNELS/2``), and
# connect.cc ncclTopoPostset doubles the searched channels into the ones a collective runs,
# ``nChannels = comm->nChannels = std::min(MAXCHANNELS,nChannels*2)`` (v2.18.5-1 line 391,
# v2.21.5-1 line 443, v2.30.4-1 line 453).
MAXCHANNELS = {"2.18": 32, "2.25": 64}

# NVLS CTAs (comm->nvlsChannels, src/transport/nvls.cc ncclNvlsInit): NVLS_NCHANNELS_SM90 16 on
# Hopper; Blackwell NVLS_NCHANNELS_SM100 32 (v2.25.1-1 on), and from v2.27.3-1 NVLS_NCHANNELS_SM100_NVL
# 24 on one node or one MNNVL clique (``multiNode = (comm->clique.size < comm->nRanks)``). NVLS and
# NVLS tree launch all of them at every size (enqueue.cc topoGetAlgoInfo ``nc = comm->nvlsChannels``).
NVLS_NCHANNELS_SM90 = 16
NVLS_NCHANNELS_SM100 = 32
NVLS_NCHANNELS_SM100_NVL = 24
# NCCL_NVLS_CHUNKSIZE default (nvls.cc ``NCCL_PARAM(NvlsChunkSize, "NVLS_CHUNKSIZE", 128*1024)``),
# NVLS tree's starting chunk from v2.21.5-1 (v2.19/2.20: the Simple step, 512 KiB); and
# NCCL_NVLSTREE_MAX_CHUNKSIZE's default -2: 64 KiB once comm->nNodes >= 4 (enqueue.cc calcCollChunking,
# ``if (maxChunkSize == -2) maxChunkSize = comm->nNodes >= 4 ? 65536 : chunkSize``, v2.21.5-1 ..
# v2.29.2-1; v2.19.3-1 ``if (info->comm->nNodes >= 4) chunkSize = 65536``).
NVLS_CHUNK_BYTES = 128 * 1024
NVLS_TREE_MAX_CHUNK_BYTES = 64 * 1024
NVLS_TREE_SMALL_CHUNK_NODES = 4
