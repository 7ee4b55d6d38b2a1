"""Shared hypothesis strategies for the collective tests: small fabrics (nominal or with
degraded ports, by direction), launch vectors and sizes, and the reference check."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from commsim.collectives import Fabric, make_kernel
from commsim.collectives.reference import REFERENCES
from commsim.network.fabric import PortScales

def two_level(nodes=4, g=8) -> Fabric:
    """NVLink-like 2 us / 300 GB/s inside a node, 8 us / 50 GB/s between nodes."""
    return Fabric(nodes=nodes, gpus_per_node=g, intra_latency=2e-6, intra_bandwidth=300e9,
                  inter_latency=8e-6, inter_bandwidth=50e9)


small_fabrics = st.builds(
    Fabric, nodes=st.integers(1, 5), gpus_per_node=st.integers(1, 4),
    intra_latency=st.floats(0, 1e-5), intra_bandwidth=st.floats(1e9, 5e11),
    inter_latency=st.floats(0, 5e-5), inter_bandwidth=st.floats(1e9, 5e11),
).filter(lambda f: f.world_size <= 16)

FACTORS = st.sampled_from([1.0, 1.0, 0.5, 0.1])


@st.composite
def port_scales(draw, ports: int) -> PortScales:
    return PortScales(tuple(draw(st.lists(FACTORS, min_size=ports, max_size=ports))),
                      tuple(draw(st.lists(FACTORS, min_size=ports, max_size=ports))))


@st.composite
def cases(draw):
    """(fabric, launch, size): a small fabric, degraded or not, per-rank launch times, a size."""
    f = draw(small_fabrics)
    if draw(st.booleans()):  # degraded ports, each direction on its own
        f = Fabric(**{**vars(f), "intra_scale": draw(port_scales(f.world_size)),
                      "inter_scale": draw(port_scales(f.nodes))})
    launch = draw(st.lists(st.floats(0, 2e-3), min_size=f.world_size, max_size=f.world_size))
    size = draw(st.floats(0, 8e6))
    return f, np.array(launch), size


def assert_matches_reference(name: str, case) -> None:
    """The planned kernel of ``name`` equals its SimPy reference to 1e-9."""
    f, launch, size = case
    got = make_kernel(name, f, size).finish_times(launch)
    want = REFERENCES[name](f, launch, size)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)
