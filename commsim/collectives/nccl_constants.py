"""NCCL's internal cost-model constants for three versions, as numbers.

Transcribed from shared/data/nccl_tuning_constants.md, which records the numeric tables of
NVIDIA/nccl src/graph/tuning.cc and src/graph/topo.h at tags v2.7.8-1 (033d7995), v2.19.3-1
(8c6c5951) and v2.30.7-1 (73cf1122). Only the algorithms this package models are kept
(Tree, Ring) and only the all-reduce / reduce-scatter / all-gather entries.
Units as in NCCL: latencies in microseconds, bandwidths in GB/s.

Index conventions: protocol order (LL, LL128, Simple); hardware NVLINK, PCI, NET;
architecture rows Volta, Ampere, Hopper; node-count columns N1 (1 node), N2 (2), N4 (> 2).
"""

from __future__ import annotations

PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("Tree", "Ring")

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

V2_19 = {
    "tag": "v2.19.3-1",
    "base_lat": {"Tree": (6.8, 14.0, 0.0), "Ring": (6.6, 14.0, 8.4)},
    "hw_lat": {
        "NVLINK": {"Tree": (0.6, 1.25, 28.0), "Ring": (0.6, 1.9, 3.4)},
        "PCI": {"Tree": (1.0, 1.9, 28.0), "Ring": (1.0, 2.5, 5.7)},
        "NET": {"Tree": (5.0, 8.5, 28.0), "Ring": (2.7, 4.0, 14.0)},
    },
    # llMaxBws rows (Volta, Ampere, Hopper) x (N1, N2, N4). The row is the architecture on one
    # node and the CPU vendor across nodes (row 0 Intel, row 1 AMD): the source labels its rows
    # "Volta-N1 / Intel-N2 / Intel-N4", "Ampere-N1 / AMD-N2 / AMD-N4", "Hopper-N1 / AMD-N2 / AMD-N4".
    "ll_max_bws": ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0)),
    # per-channel caps, rows (Volta, Ampere, Hopper) x (N1, N2, N4)
    "per_ch_max_ring_ll128": ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7)),
    "per_ch_max_tree_ll128": ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0)),
    "per_ch_max_tree": ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0)),
    "tree_correction": {
        "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
        "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
        "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
    },
}

V2_30 = {
    "tag": "v2.30.7-1",
    "base_lat": {"Tree": (6.8, 14.0, 8.4), "Ring": (6.6, 14.0, 8.4)},
    "hw_lat": {
        "NVLINK": {"Tree": (0.6, 1.25, 4.0), "Ring": (0.6, 1.9, 3.4)},
        "PCI": {"Tree": (1.0, 1.9, 4.0), "Ring": (1.0, 2.5, 5.7)},
        "NET": {"Tree": (5.0, 8.5, 14.0), "Ring": (2.7, 4.0, 14.0)},
    },
    "ll_max_bws": ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0)),  # same indexing as 2.19
    "per_ch_max_ring_ll128": ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7)),
    "per_ch_max_tree_ll128": ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0)),
    "per_ch_max_tree": ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0)),
    "tree_correction": {
        "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
        "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
        "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
    },
}

VERSIONS = {"2.7": V2_7, "2.19": V2_19, "2.30": V2_30}

# getNetOverhead (2.19, 2.30): per network step, us; x3 for Simple.
NET_OVERHEAD_US = {"Intel": 1.0, "AMD": 2.0, "other": 1.0}
