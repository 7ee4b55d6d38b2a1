"""cluster.gpu_arch: the GPUs' generation, which picks NCCL's per-generation tables where a
scenario's collectives are priced as NCCL runs them (collective.algorithm: nccl, or a
collective.model of NCCL's). Every cluster was priced as Hopper before, an A100 or V100 one too."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from commsim.collectives.nccl_model import NcclKernel, NcclModel
from commsim.collectives.nccl_tuner import PhysicalKernel, plan
from commsim.errors import InputError, ScenarioError
from commsim.network.fabric import GPU_ARCHS
from commsim.network.system import system_of_fabric
from commsim.scenario import spec
from commsim.scenario.schema import parse_scenario
from commsim.scenario.topology import cluster_fabric

DOC = {
    "cluster": {"nodes": 2, "gpus_per_node": 8, "intra_node": {"bandwidth": "300 GB/s"},
                "inter_node": {"bandwidth": "200 GB/s"}, "nics_per_node": 8},
    "model": {"parameters": 1000},
    "compute": {"forward": "10 ms", "backward": "20 ms"},
}


def scenario(cluster=None, collective=None):
    d = copy.deepcopy(DOC)
    if cluster is not None:
        d["cluster"] = cluster
    if collective is not None:
        d["collective"] = collective
    return parse_scenario(d, "s.yaml")


def test_the_key_names_the_generations_the_fabric_knows():
    from typing import get_args
    assert get_args(spec.GpuArch) == GPU_ARCHS


@pytest.mark.parametrize("preset, arch", [("dgx-a100", "ampere"), ("dgx-h100", "hopper"), ("dgx-b200", "blackwell"),
                                          ("dgx1-v100", "volta"), ("pcie-8gpu", "volta")])
def test_a_preset_states_its_gpus_generation(preset, arch):
    assert scenario({"preset": preset, "nodes": 2}).cluster.gpu_arch == arch


def test_without_a_preset_it_is_hopper_and_a_written_key_wins_over_the_preset():
    assert scenario().cluster.gpu_arch == "hopper"
    assert scenario({"preset": "dgx-h100", "nodes": 2, "gpu_arch": "blackwell"}).cluster.gpu_arch == "blackwell"


def test_a_bad_generation_is_one_line_naming_the_key():
    with pytest.raises(ScenarioError) as err:
        scenario({**DOC["cluster"], "gpu_arch": "ampre"})
    assert str(err.value).startswith("s.yaml: cluster.gpu_arch: expected one of volta, ampere, hopper, blackwell")
    assert "ampere" in str(err.value).split("got")[1]  # the did-you-mean hint


def test_the_physical_model_prices_a_cluster_with_its_generations_tables():
    a100 = scenario({"preset": "dgx-a100", "nodes": 4})
    fabric = cluster_fabric(a100.cluster)
    assert system_of_fabric(fabric).gpu_arch == "ampere"
    as_hopper = system_of_fabric(fabric, "hopper")
    assert system_of_fabric(fabric) != as_hopper  # NCCL's protocol priors are per generation
    size = 256e6
    kernel = PhysicalKernel("all_reduce", fabric, size)
    ampere = plan("all_reduce", system_of_fabric(fabric, "ampere"), 4, 8)
    hopper = plan("all_reduce", as_hopper, 4, 8)
    assert kernel.seconds == pytest.approx(float(ampere.time_us([size])[0]) * 1e-6)
    # the generation changes what runs at this size (ring/Simple on Ampere, ring/LL128 as Hopper)
    assert ampere.choose([size]) != hopper.choose([size])


def test_nccls_cost_models_read_the_generation_and_refuse_one_they_have_no_table_for():
    fabric = cluster_fabric(scenario({"preset": "dgx-a100", "nodes": 4}).cluster)
    kernel = NcclKernel("nccl-2.19", "auto", "all_reduce", fabric, 64e6)
    a, p, seconds = NcclModel.named("nccl-2.19", arch="Ampere").choose(fabric, 64e6, "all_reduce", None)
    assert kernel.seconds == pytest.approx(seconds)
    with pytest.raises(ScenarioError) as err:
        scenario({"preset": "dgx-b200", "nodes": 2}, {"model": "nccl-2.30"})
    assert str(err.value).startswith("s.yaml: cluster.gpu_arch: the nccl-2.30 cost model has tables for volta, "
                                     "ampere, hopper GPUs, got blackwell")
    b200 = cluster_fabric(scenario({"preset": "dgx-b200", "nodes": 2}).cluster)
    with pytest.raises(InputError) as kernel_err:  # the kernel says the same, from the same function
        NcclKernel("nccl-2.30", "auto", "all_reduce", b200, 64e6)
    assert str(kernel_err.value).startswith("scenario: cluster.gpu_arch: the nccl-2.30 cost model has tables for "
                                            "volta, ampere, hopper GPUs, got blackwell")


def test_every_shipped_generation_prices_finite_times():
    for arch in GPU_ARCHS:
        fabric = cluster_fabric(scenario({**DOC["cluster"], "gpu_arch": arch}).cluster)
        t = PhysicalKernel("all_reduce", fabric, 1e8).seconds
        assert np.isfinite(t) and t > 0


@pytest.mark.parametrize("cluster, nvls", [
    ({"preset": "dgx-h100", "nodes": 1}, True),
    ({"preset": "dgx-b200", "nodes": 1}, True),
    ({"preset": "dgx-a100", "nodes": 1}, False),                       # NVSwitch 2: no multicast
    ({"preset": "dgx1-v100", "nodes": 1}, False),                      # no NVSwitch
    ({**DOC["cluster"], "intra_kind": "nvlink", "gpu_arch": "hopper"}, False),  # NVLink without a switch
])
def test_nvls_where_the_nvswitch_has_it(cluster, nvls):
    # a scenario's cluster ran no NVLS before, so DGX H100 nodes were priced by rings and trees only
    fabric = cluster_fabric(scenario(cluster).cluster)
    assert system_of_fabric(fabric).nvls is nvls


def test_a_dgx_h100_node_runs_nvls_at_large_sizes_as_nccl_does():
    fabric = cluster_fabric(scenario({"preset": "dgx-h100", "nodes": 1}).cluster)
    kernel = PhysicalKernel("all_reduce", fabric, 256e6)
    assert kernel.chosen == "nccl:nvls/Simple"
