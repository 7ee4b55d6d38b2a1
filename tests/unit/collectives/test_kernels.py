"""The registry and the kernel contract: every algorithm, every kind, every cost model."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim.collectives import (ALGORITHMS, Fabric, finish_times, flat, get, make_kernel, table,
                                 uniform_time)
from commsim.collectives.contract import KINDS, Algorithm, Kernel
from commsim.collectives.kernels import (ALL_REDUCE, REGISTRY, algorithm_for, algorithms_for, collective_time,
                                         resolve, selection)
from commsim.network.fabric import LEVELS

MB = 1 << 20
F = Fabric(nodes=3, gpus_per_node=4, intra_latency=1e-6, intra_bandwidth=300e9,
           inter_latency=5e-6, inter_bandwidth=12.5e9)


def test_registry_names_kinds_and_planners():
    assert list(REGISTRY) == ["ring", "tree", "hierarchical", "halving_doubling", "reduce_broadcast", "auto", "nccl"]
    assert REGISTRY["ring"].kinds == REGISTRY["nccl"].kinds == KINDS
    assert all(a.kinds == ("all_reduce",) for name, a in REGISTRY.items() if name not in ("ring", "nccl"))
    assert ALGORITHMS == ALL_REDUCE + ("nccl", "reduce_scatter", "all_gather")
    assert selection("all_gather") == (REGISTRY["ring"], "all_gather")
    assert get("tree") is REGISTRY["tree"]
    with pytest.raises(ValueError, match="kinds must be among"):
        Algorithm("bogus", ("alltoall",), lambda kind, fabric, size: None)


@pytest.mark.parametrize("model", ["alpha-beta", "nccl-2.7", "nccl-2.19", "nccl-2.30"])
def test_every_kernel_honours_the_contract(model):
    launch = np.random.default_rng(2).uniform(0, 1e-3, F.world_size)
    for name in algorithms_for(model):
        k = make_kernel(name, F, 4 * MB, model)
        assert isinstance(k.kind, str) and isinstance(k.chosen, str) and k.world_size == 12 and k.size == 4 * MB
        assert k.kind == selection(name)[1]
        got = k.finish_times(launch)
        assert got.shape == (12,) and np.all(got >= launch)
        # simultaneous launch finishes uniform_time later (halving-doubling: its closed form is
        # exact here, every exchange of a step on one level)
        t0 = 2.0
        assert k.finish_times(np.full(12, t0)).max() == pytest.approx(t0 + k.uniform_time(), rel=1e-9)
        assert isinstance(k, Kernel)


def test_a_kernel_is_planned_on_the_fabric_priced_for_its_size():
    seen = []

    def pricing(level, size, n):
        seen.append((level, size, n))
        return (1e-6, 100e9) if level == "intra_node" else (4e-6, 10e9)

    priced = Fabric(**{**vars(F), "pricing": pricing})
    assert make_kernel("ring", priced, 8 * MB).uniform_time() == make_kernel(
        "ring", priced.at_size(8 * MB), 8 * MB).uniform_time()
    nominal = Fabric(**{**vars(F), "intra_latency": 1e-6, "intra_bandwidth": 100e9, "inter_latency": 4e-6,
                        "inter_bandwidth": 10e9})
    assert uniform_time("tree", priced, 8 * MB) == uniform_time("tree", nominal, 8 * MB)
    assert seen[:2] == [(LEVELS[0], 8 * MB, 12), (LEVELS[1], 8 * MB, 12)]


def test_halves_run_as_rings_whatever_the_all_reduce_algorithm():
    assert algorithm_for("all_reduce", "tree") == "tree"
    assert algorithm_for("reduce_scatter", "tree") == "reduce_scatter"
    assert make_kernel(algorithm_for("all_gather", "hierarchical"), F, MB).chosen == "ring"


def test_auto_resolves_per_size():
    big = Fabric(nodes=64, gpus_per_node=8, intra_latency=3.4e-6, intra_bandwidth=450e9,
                 inter_latency=14e-6, inter_bandwidth=400e9)
    assert resolve("auto", big, 1024) != "ring"
    assert resolve("tree", big, 1024) == "tree"


def test_nccl_model_kernel_waits_for_the_last_launch():
    k = make_kernel("tree", F, 4e6, model="nccl-2.19")
    t = collective_time("tree", F, 4e6, model="nccl-2.19")
    np.testing.assert_allclose(k.finish_times(np.array([0.0] * 11 + [1.0])), 1.0 + t)
    assert k.chosen.startswith("Tree/")
    with pytest.raises(ValueError, match="collective model must be one of alpha-beta"):
        make_kernel("ring", F, 1e6, model="logp")
    with pytest.raises(ValueError, match="use model alpha-beta"):
        make_kernel("hierarchical", F, 1e6, model="nccl-2.19")


def test_algorithms_for_each_model():
    assert algorithms_for("alpha-beta") == ALGORITHMS
    assert algorithms_for("nccl-2.19") == ("ring", "tree", "auto", "reduce_scatter", "all_gather")


def test_single_rank_costs_nothing():
    f = flat(1, 5e-6, 10e9)
    for name in ALGORITHMS:
        assert uniform_time(name, f, MB) == 0.0
        assert finish_times(name, f, [2.5], MB).tolist() == [2.5]


def test_table_rows_name_what_runs_and_the_fastest():
    rows = table(["ring", "auto", "reduce_scatter"], F, [MB])
    by = {r["algorithm"]: r for r in rows}
    assert by["ring"]["chosen"] == "ring" and by["reduce_scatter"]["chosen"] == "reduce_scatter"
    assert by["auto"]["chosen"] in ALL_REDUCE and by["auto"]["fastest"]
    assert not by["reduce_scatter"]["fastest"]  # only all-reduces compete
    nccl = table(["ring"], F, [MB], "nccl-2.19")[0]
    assert nccl["chosen"].startswith("Ring/")
    with pytest.raises(ValueError, match="covers algorithms"):
        table(["hierarchical"], F, [MB], "nccl-2.19")


fabrics = st.builds(Fabric, nodes=st.integers(1, 40), gpus_per_node=st.sampled_from([1, 2, 3, 4, 8]),
                    intra_latency=st.floats(0, 1e-5), intra_bandwidth=st.floats(1e9, 1e12),
                    inter_latency=st.floats(0, 5e-5), inter_bandwidth=st.floats(1e9, 1e12))


@settings(max_examples=60, deadline=None)
@given(fabrics, st.floats(0, 1e9), st.floats(1.0, 8.0), st.sampled_from(list(ALGORITHMS)))
def test_monotone_in_size(f, size, factor, name):
    assert uniform_time(name, f, size * factor) >= uniform_time(name, f, size) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(fabrics, st.floats(1, 1e9), st.sampled_from(list(ALGORITHMS)))
def test_kernel_with_equal_launch_matches_closed_form(f, size, name):
    pow2 = lambda x: x & (x - 1) == 0
    runs = resolve(name, f, size)  # auto runs its pick, which may be halving-doubling
    if runs == "halving_doubling" and f.nodes > 1 and not (pow2(f.gpus_per_node) and pow2(f.world_size)):
        return  # closed form is exact only when every exchange of a step uses one link class
    t0 = 3.0
    got = finish_times(name, f, np.full(f.world_size, t0), size)
    assert got.max() == pytest.approx(t0 + uniform_time(name, f, size), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_kernels_scale_to_thousands_of_ranks(name):
    f = Fabric(nodes=256, gpus_per_node=8, intra_latency=3.4e-6, intra_bandwidth=450e9,
               inter_latency=14e-6, inter_bandwidth=400e9)
    launch = np.random.default_rng(0).uniform(0, 1e-3, f.world_size)
    got = make_kernel(name, f, 25e6).finish_times(launch)
    assert got.shape == (2048,) and np.all(got >= launch)


def test_unknown_algorithm_and_bad_launch_shape():
    with pytest.raises(ValueError, match="unknown collective algorithm 'bogus'"):
        get("bogus")
    with pytest.raises(ValueError, match="shape"):
        finish_times("ring", flat(4, 5e-6, 10e9), np.zeros(3), MB)
    for name in ("tree", "hierarchical", "halving_doubling", "reduce_broadcast"):
        with pytest.raises(ValueError, match="shape"):
            make_kernel(name, flat(4, 5e-6, 10e9), MB).finish_times(np.zeros(3))
    with pytest.raises(ValueError, match="implements all_reduce, not 'all_gather'"):
        REGISTRY["tree"].plan("all_gather", F, MB)


@pytest.mark.parametrize("nodes", [3, 32])  # 32 nodes: the equal-segment shortcuts of the rings
@pytest.mark.parametrize("name", ALGORITHMS)
def test_a_plan_reused_returns_new_arrays_its_later_calls_leave_alone(name, nodes):
    # kernels keep work buffers between calls: what a call returned must stay as it was
    f = Fabric(nodes=nodes, gpus_per_node=4, intra_latency=1e-6, intra_bandwidth=300e9,
               inter_latency=5e-6, inter_bandwidth=12.5e9)
    rng = np.random.default_rng(nodes)
    launches = [rng.uniform(0, 1e-3, f.world_size) for _ in range(4)]
    reused = make_kernel(name, f, 4 * MB)
    got = [reused.finish_times(launch) for launch in launches]
    for launch, out in zip(launches, got):
        np.testing.assert_array_equal(out, make_kernel(name, f, 4 * MB).finish_times(launch))
    assert len({id(out) for out in got}) == len(got) and not any(np.shares_memory(got[0], o) for o in got[1:])


# --- the static table of the lazy registry ---------------------------------------------------

def test_static_table_is_what_the_modules_declare():
    """TABLE (name -> module, kinds) and COST_MODELS are constants so that nothing is imported to
    know them; each entry must say what its module's ALGORITHM says."""
    import ast
    import importlib
    import pkgutil

    import commsim.collectives as package
    from commsim.collectives import nccl_model
    from commsim.collectives.kernels import COST_MODELS, TABLE

    for name, (module, kinds) in TABLE.items():
        alg = importlib.import_module(f"commsim.collectives.{module}").ALGORITHM
        assert (alg.name, alg.kinds) == (name, kinds), module
        assert REGISTRY[name] is alg
    assert COST_MODELS == ("alpha-beta",) + tuple(nccl_model.MODELS)
    # every module of the package that declares an ALGORITHM is registered
    declaring = set()
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg:  # commsim.collectives.nccl: NCCL's models, no registry entry of their own
            continue
        tree = ast.parse(Path(package.__path__[0], f"{info.name}.py").read_text())
        if any(isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ALGORITHM" for t in node.targets)
               for node in tree.body):
            declaring.add(info.name)
    assert declaring == {module for module, _ in TABLE.values()}


def test_registry_is_a_read_only_mapping_over_the_table():
    from commsim.collectives.kernels import TABLE

    assert len(REGISTRY) == len(TABLE) and list(REGISTRY.keys()) == list(TABLE)
    assert "tree" in REGISTRY and "bogus" not in REGISTRY
    with pytest.raises(KeyError):
        REGISTRY["bogus"]
    with pytest.raises(TypeError):
        REGISTRY["tree"] = REGISTRY["ring"]
    with pytest.raises(ValueError, match="unknown collective algorithm 'bogus'"):
        selection("bogus")


# Imports the given module, touches the given kernels names, prints the collectives modules loaded.
_PROBE = """
import json, sys, importlib
from commsim.collectives import kernels
for expr in sys.argv[1:]:
    eval(expr, {"kernels": kernels})
print(json.dumps(sorted(m for m in sys.modules if m.startswith("commsim.collectives.") or m == "commsim.network.system")))
"""

_ALGORITHM_MODULES = ["commsim.collectives.auto", "commsim.collectives.halving_doubling",
                      "commsim.collectives.hierarchical", "commsim.collectives.nccl",
                      "commsim.collectives.nccl_constants", "commsim.collectives.nccl_model",
                      "commsim.collectives.nccl_tuner", "commsim.collectives.reduce_broadcast",
                      "commsim.collectives.ring", "commsim.collectives.tree", "commsim.network.system"]


def _loaded(*exprs):
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", _PROBE, *exprs], cwd=root, env=dict(os.environ, PYTHONPATH=str(root)),
                         capture_output=True, text=True, check=True)
    return [m for m in json.loads(out.stdout) if m in _ALGORITHM_MODULES]


def test_the_registry_imports_an_algorithm_on_first_use_only():
    # the constants, the model check and the alpha-beta coverage need no algorithm module
    assert _loaded("kernels.ALGORITHMS", "kernels.ALL_REDUCE", "kernels.COST_MODELS", "list(kernels.REGISTRY)",
                   "kernels.check_model('nccl-2.19')", "kernels.algorithms_for('alpha-beta')") == []
    assert _loaded("kernels.REGISTRY['tree']") == ["commsim.collectives.tree"]
    assert _loaded("kernels.selection('all_gather')") == ["commsim.collectives.ring"]
    assert _loaded("kernels.algorithms_for('nccl-2.7')") == ["commsim.collectives.nccl_constants",
                                                             "commsim.collectives.nccl_model"]


def test_package_names_load_on_first_use_and_match_the_imports_written_for_readers():
    import ast

    import commsim.collectives as package

    tree = ast.parse(Path(package.__file__).read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If))  # if TYPE_CHECKING:
    written = {alias.asname or alias.name: node.module for node in ast.walk(guarded)
               if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert written == package._EXPORTS
    assert set(package.__all__) == set(package._EXPORTS) | {"algbw", "busbw", "busbw_factor"}
    for name in package.__all__:
        assert getattr(package, name) is not None
    from commsim.collectives.busbw import busbw as function

    assert package.busbw is function  # the function, not its submodule of the same name
    with pytest.raises(AttributeError, match="no_such_name"):
        package.no_such_name


@pytest.mark.parametrize("model", ["alpha-beta", "nccl-2.19"])
def test_finish_times_returns_a_new_array_later_calls_never_write(model):
    """The contract's promise the FSDP step relies on: it keeps a result while the same kernel
    is evaluated again."""
    rng = np.random.default_rng(5)
    for name in algorithms_for(model):
        k = make_kernel(name, F, 4 * MB, model)
        first_launch = rng.uniform(0, 1e-3, F.world_size)
        first = k.finish_times(first_launch)
        kept = first.copy()
        assert not np.shares_memory(first, first_launch), name
        for launch in (rng.uniform(0, 1e-3, F.world_size), np.zeros(F.world_size), first_launch + 1.0):
            again = k.finish_times(launch)
            assert not np.shares_memory(again, first), name
        first_launch[:] = 7.0  # nor does the caller's launch vector, written afterwards
        assert np.array_equal(first, kept), name
