"""Tests for commsim.scenario.loader: scenario YAML -> frozen Scenario, defaults, --set, and bad input."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commsim.scenario import spec
from commsim.errors import ScenarioError
from commsim.scenario.loader import (
    ALGORITHMS,
    DEFAULT_INTER_NODE_LATENCY,
    DEFAULT_INTRA_NODE_LATENCY,
    MAX_WORLD_SIZE,
    STRAGGLER_KINDS,
    apply_overrides,
    load_document,
    load_scenario,
    load_scenario_document,
    parse_scenario,
)

FULL_YAML = """\
name: demo
description: four nodes, one hot GPU
seed: 3
steps: 50
cluster:
  nodes: 4
  gpus_per_node: 8
  intra_node: {bandwidth: 300 GB/s, latency: 3 us}
  inter_node: {bandwidth: 100 Gbps, latency: 10 us}
model: {parameters: 1e9, grad_dtype: bf16}
compute: {forward: 0.1 s, backward: 200 ms, optimizer: 5 ms, batch_size: 16}
ddp: {bucket_cap: 25 MB, first_bucket: 1 MiB, overlap: false, gradient_accumulation: 2}
collective: {algorithm: ring}
stragglers:
  - {kind: slow_rank, ranks: 3, factor: 1.2}
  - {kind: throttle, ranks: [5, 6], heat_up: 30 s, throttled_time: 10 s, clock_fraction: 0.5, phase: 4 s}
  - {kind: jitter, cv: 0.05, distribution: gamma}
  - {kind: stall, ranks: all, duration: 2 s, every: 100}
  - {kind: stall, ranks: [0], duration: 50 ms, probability: 0.01}
  - {kind: slow_link, node: 1, factor: 0.5}
  - {kind: slow_link, rank: 31, factor: 1}
"""

FULL = spec.Scenario(
    name="demo",
    description="four nodes, one hot GPU",
    seed=3,
    steps=50,
    cluster=spec.Cluster(
        nodes=4,
        gpus_per_node=8,
        intra_node=spec.Link(bandwidth=300e9, latency=3e-6),
        inter_node=spec.Link(bandwidth=12.5e9, latency=10e-6),
    ),
    model=spec.Model(parameters=10**9, grad_dtype="bf16"),
    compute=spec.Compute(forward=0.1, backward=0.2, optimizer=0.005, batch_size=16),
    ddp=spec.DDP(bucket_cap=25e6, first_bucket=1024**2, overlap=False, gradient_accumulation=2),
    collective=spec.Collective(algorithm="ring"),
    stragglers=(
        spec.SlowRank(ranks=(3,), factor=1.2),
        spec.Throttle(ranks=(5, 6), heat_up=30.0, throttled_time=10.0, clock_fraction=0.5, phase=4.0),
        spec.Jitter(cv=0.05, distribution="gamma", ranks=None),
        spec.Stall(ranks=tuple(range(32)), duration=2.0, every=100),
        spec.Stall(ranks=(0,), duration=0.05, probability=0.01),
        spec.SlowLink(factor=0.5, node=1),
        spec.SlowLink(factor=1.0, rank=31),
    ),
)

MINIMAL = {
    "cluster": {
        "nodes": 2,
        "gpus_per_node": 4,
        "intra_node": {"bandwidth": "300 GB/s"},
        "inter_node": {"bandwidth": "100 Gbps"},
    },
    "model": {"parameters": 1000},
    "compute": {"forward": "10 ms", "backward": "20 ms"},
}

SRC = "run.yaml"


def full_doc():
    return yaml.safe_load(FULL_YAML)


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(doc, source=SRC) -> str:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(doc, source)
    return str(err.value)


def assert_message(text: str, *fragments: str) -> None:
    assert "\n" not in text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"


# --- good input ----------------------------------------------------------------------------------


def test_full_scenario_from_file(tmp_path):
    assert load_scenario(write(tmp_path, FULL_YAML)) == FULL


def test_defaults(tmp_path):
    scenario = load_scenario(write(tmp_path, yaml.safe_dump(MINIMAL), name="tiny_job.yaml"))
    assert scenario.name == "tiny_job"  # the file's stem
    assert scenario.description == ""
    assert scenario.steps == 100
    assert scenario.seed == 0
    assert scenario.cluster.intra_node == spec.Link(bandwidth=300e9, latency=3.4e-6)
    assert scenario.cluster.inter_node == spec.Link(bandwidth=12.5e9, latency=14e-6)
    assert (DEFAULT_INTRA_NODE_LATENCY, DEFAULT_INTER_NODE_LATENCY) == (3.4e-6, 14e-6)
    assert scenario.model.grad_dtype == "fp32"
    assert scenario.compute.optimizer == 0.0
    assert scenario.compute.batch_size == 1
    # PyTorch's bucket_cap_mb=25 is 25 MiB; its first bucket is 1 MiB.
    assert scenario.ddp == spec.DDP(bucket_cap=25 * 2**20, first_bucket=2**20, overlap=True, gradient_accumulation=1)
    assert scenario.collective.algorithm == "ring"
    assert scenario.stragglers == ()


def test_sharding_choices():
    for sharding in ("none", "zero2", "fsdp"):
        doc = mutate("ddp.gradient_accumulation", 1)
        doc["ddp"]["sharding"] = sharding
        assert parse_scenario(doc, SRC).ddp.sharding == sharding
    assert parse_scenario(full_doc(), SRC).ddp.sharding == "none"  # the default: plain DDP


def test_default_name_without_a_yaml_source():
    assert parse_scenario(MINIMAL, "<string>").name == "scenario"


def test_sections_may_be_empty_mappings():
    doc = dict(MINIMAL, ddp={}, collective={}, stragglers=[])
    scenario = parse_scenario(doc, SRC)
    assert scenario.ddp == spec.DDP() and scenario.stragglers == ()


def test_latency_may_be_zero():
    doc = copy.deepcopy(MINIMAL)
    doc["cluster"]["inter_node"]["latency"] = 0
    assert parse_scenario(doc, SRC).cluster.inter_node.latency == 0.0


def test_counts_written_as_1e9_strings(tmp_path):
    text = yaml.safe_dump(MINIMAL).replace("parameters: 1000", "parameters: 1.0e9")
    doc = load_document(write(tmp_path, text))
    assert doc["model"]["parameters"] == "1.0e9"  # PyYAML leaves it a string ...
    assert parse_scenario(doc, SRC).model.parameters == 10**9  # ... the loader reads a count


def test_rank_forms():
    doc = dict(MINIMAL, stragglers=[
        {"kind": "slow_rank", "ranks": 7, "factor": 2},
        {"kind": "slow_rank", "ranks": [1, 0], "factor": 2},
        {"kind": "slow_rank", "ranks": "all", "factor": 2},
        {"kind": "jitter", "ranks": "all", "cv": 0.1},
        {"kind": "jitter", "ranks": [2], "cv": 0},
    ])
    got = parse_scenario(doc, SRC).stragglers
    assert [s.ranks for s in got] == [(7,), (1, 0), tuple(range(8)), None, (2,)]


def test_every_algorithm_and_kind_is_accepted():
    assert ALGORITHMS == ("ring", "tree", "hierarchical", "halving_doubling", "reduce_broadcast", "auto", "nccl")
    assert STRAGGLER_KINDS == ("slow_rank", "throttle", "jitter", "stall", "slow_link")
    for algorithm in ALGORITHMS:
        assert parse_scenario(dict(MINIMAL, collective={"algorithm": algorithm}), SRC).collective.algorithm == algorithm


def test_cost_model_must_cover_the_algorithm():
    sc = parse_scenario(dict(MINIMAL, collective={"algorithm": "tree", "model": "nccl-2.19"}), SRC)
    assert (sc.collective.algorithm, sc.collective.model) == ("tree", "nccl-2.19")
    with pytest.raises(ScenarioError, match=r"collective.algorithm: expected one of ring, tree, auto under model nccl-2.19, got 'hierarchical'"):
        parse_scenario(dict(MINIMAL, collective={"algorithm": "hierarchical", "model": "nccl-2.19"}), SRC)
    with pytest.raises(ScenarioError, match="collective.model"):
        parse_scenario(dict(MINIMAL, collective={"model": "nccl-9"}), SRC)


def test_cluster_preset_fills_links_and_user_keys_win():
    doc = dict(MINIMAL, cluster={"preset": "dgx-h100", "nodes": 4})
    c = parse_scenario(doc, SRC).cluster
    assert (c.nodes, c.gpus_per_node, c.nics_per_node) == (4, 8, 8)
    assert c.inter_node.bandwidth == pytest.approx(8 * 400e9 / 8)  # 8 x 400 Gb/s NICs
    doc = dict(MINIMAL, cluster={"preset": "dgx-h100", "nodes": 4, "nics_per_node": 4, "oversubscription": 2})
    assert parse_scenario(doc, SRC).cluster.inter_node.bandwidth == pytest.approx(4 * 50e9 / 2)
    with pytest.raises(ScenarioError, match="cluster.preset"):
        parse_scenario(dict(MINIMAL, cluster={"preset": "dgx-z9", "nodes": 4}), SRC)
    bad = dict(MINIMAL, cluster={"preset": "dgx-h100", "nodes": 4, "intra_kind": "carrier-pigeon"})
    with pytest.raises(ScenarioError, match="cluster.intra_kind"):
        parse_scenario(bad, SRC)


@pytest.mark.parametrize("distribution", ["lognormal", "normal", "gamma", "exponential"])
def test_jitter_distributions(distribution):
    doc = dict(MINIMAL, stragglers=[{"kind": "jitter", "distribution": distribution, "cv": 0.2}])
    assert parse_scenario(doc, SRC).stragglers[0] == spec.Jitter(cv=0.2, distribution=distribution)


# --- --set overrides -----------------------------------------------------------------------------


def test_overrides_from_the_issue(tmp_path):
    path = write(tmp_path, FULL_YAML)
    scenario = load_scenario(path, ["stragglers=[]", "ddp.bucket_cap=4 GB", "ddp.overlap=true"])
    assert scenario.stragglers == ()
    assert scenario.ddp.bucket_cap == 4e9
    assert scenario.ddp.overlap is True
    assert load_scenario(path, ["stragglers[0].factor=2"]).stragglers[0].factor == 2.0


def test_override_creates_missing_mappings_and_does_not_mutate():
    doc = copy.deepcopy(MINIMAL)
    out = apply_overrides(doc, ["ddp.overlap=false", "collective.algorithm=ring"])
    assert out["ddp"] == {"overlap": False}
    assert "ddp" not in doc  # the input is left alone
    assert parse_scenario(out, SRC).ddp.overlap is False


def test_override_fills_an_empty_section():
    out = apply_overrides(dict(MINIMAL, ddp=None), ["ddp.bucket_cap=1 MB"])
    assert out["ddp"] == {"bucket_cap": "1 MB"}


def test_override_value_is_yaml():
    out = apply_overrides({}, ["a=1e9", "b=[1, 2]", "c='x=y'", "d=", "e=a=b", "f= 4 GB "])
    assert out == {"a": "1e9", "b": [1, 2], "c": "x=y", "d": None, "e": "a=b", "f": "4 GB"}


def test_later_overrides_win():
    out = apply_overrides(MINIMAL, ["steps=5", "steps=7"])
    assert parse_scenario(out, SRC).steps == 7


def test_steps_and_seed_arguments(tmp_path):
    scenario = load_scenario(write(tmp_path, FULL_YAML), ["steps=5"], steps=9, seed=11)
    assert (scenario.steps, scenario.seed) == (9, 11)


def test_load_scenario_document_hands_back_what_it_validated(tmp_path):
    """The document the loader parsed (after --set and the flags): what `commsim run` reads the
    `mitigation:` section from instead of parsing the file a second time."""
    path = write(tmp_path, FULL_YAML + "mitigation: [fp16]\n")
    scenario, doc = load_scenario_document(path, ["ddp.overlap=true", "mitigation[0]=fp32"], steps=9, seed=11)
    assert scenario == load_scenario(path, ["ddp.overlap=true", "mitigation[0]=fp32"], steps=9, seed=11)
    assert (doc["steps"], doc["seed"], doc["ddp"]["overlap"], doc["mitigation"]) == (9, 11, True, ["fp32"])
    assert parse_scenario(doc, str(path)) == scenario
    with pytest.raises(ScenarioError, match=r"\(after --set 'ddp.overlap=3'\)"):
        load_scenario_document(path, ["ddp.overlap=3"])


@pytest.mark.parametrize(
    "override, fragments",
    [
        ("steps", ["--set 'steps'", "expected KEY=VALUE", "got no '='"]),
        ("=3", ["--set '=3'", "expected KEY=VALUE", "got an empty key"]),
        (" =3", ["expected KEY=VALUE", "got an empty key"]),
        ("a..b=1", ["expected a key path like", "got 'a..b'"]),
        ("a[x]=1", ["expected a key path like", "got 'a[x]'"]),
        ("stragglers[9].factor=2", ["stragglers[9]", "expected an index in 0..6", "got 9"]),
        ("name.x=3", ["name.x", "expected name to be a mapping", "got 'demo'"]),
        ("ddp[0]=3", ["ddp[0]", "expected ddp to be a list", "(a mapping)"]),
        ("steps=[", ["--set 'steps=['", "invalid YAML at line 1", "in the value '['"]),
        ("stragglers[" + "9" * 5000 + "].cv=1", ["expected a list index of at most 18 digits, got one of 5000 digits"]),
        ("stragglers[\uff10].cv=1", ["expected a key path like", "got 'stragglers[\uff10].cv'"]),
        ("steps=!!int abc", ["invalid YAML at line 1, column 1: expected a valid !!int value, got 'abc'",
                             "in the value '!!int abc'"]),
        ("steps=!!timestamp 2020-13-45", ["expected a valid !!timestamp value", "(month must be in 1..12)"]),
        ("x=" + "1" * 5000, ["expected an integer of at most 4300 digits, got one of 5000 digits"]),
        ("x=" + "[" * 100, ["nested more than 50 levels deep"]),
    ],
)
def test_bad_overrides(override, fragments):
    with pytest.raises(ScenarioError) as err:
        apply_overrides(full_doc(), [override])
    assert_message(str(err.value), *fragments)


def test_full_width_digits_are_not_counts(tmp_path):
    path = write(tmp_path, FULL_YAML.replace("nodes: 4", "nodes: \uff14"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert_message(str(err.value), f"{path}: cluster.nodes: expected a whole number like 1000 or '1e9', got '\uff14' "
                                   "(digits must be ASCII 0-9)")
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, FULL_YAML), ["cluster.nodes=\uff12"])
    assert_message(str(err.value), "(after --set 'cluster.nodes=\uff12'): cluster.nodes: expected a whole number")


def test_a_key_a_removed_preset_filled_is_the_flags_fault(tmp_path):
    """Without the preset its mapping's keys are missing: the error named the file alone, as if
    the file lacked them, not the --set that removed the preset."""
    path = tmp_path / "p.yaml"
    path.write_text("cluster: {preset: dgx-h100, nodes: 2}\nmodel: {parameters: 1e6}\n"
                    "compute: {forward: 10 ms, backward: 20 ms}\n")
    load_scenario(path)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path, ["cluster.preset=null"])
    assert str(err.value).startswith(f"{path} (after --set 'cluster.preset=null'): cluster.gpus_per_node: required")
    with pytest.raises(ScenarioError) as err:  # a key the file writes is still the file's
        load_scenario(path, ["cluster.preset=null", "cluster.gpus_per_node=8"])
    assert "(after --set 'cluster.preset=null')" in str(err.value)
    with pytest.raises(ScenarioError) as err:  # not a preset's mapping: no flag to blame
        load_scenario(path, ["model.grad_dtype=fp32", "compute.forward=abc"])
    assert str(err.value).startswith(f"{path} (after --set 'compute.forward=abc'): compute.forward")


def test_override_into_an_empty_list():
    with pytest.raises(ScenarioError, match=r"expected no index \(the list is empty\)"):
        apply_overrides({"stragglers": []}, ["stragglers[0].factor=2"])


def test_validation_error_names_the_flag(tmp_path):
    path = write(tmp_path, FULL_YAML)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path, ["ddp.bucket_cap=5 us"])
    assert_message(
        str(err.value),
        f"{path} (after --set 'ddp.bucket_cap=5 us'): ddp.bucket_cap: '5 us' is a time, expected a size",
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(path, steps=0)
    assert_message(str(err.value), f"{path} (after --steps 0): steps: expected a positive count (> 0), got 0")
    with pytest.raises(ScenarioError) as err:  # the error is at the mapping that holds the set key
        load_scenario(path, ["stragglers[3].probability=0.5"])
    assert_message(str(err.value), "(after --set 'stragglers[3].probability=0.5'): stragglers[3]: expected exactly one")
    with pytest.raises(ScenarioError) as err:  # an error elsewhere is the file's own
        load_scenario(path, ["ddp.overlap=true", "stragglers[0].ranks=99"])
    assert_message(str(err.value), "(after --set 'stragglers[0].ranks=99'): stragglers[0].ranks: expected a rank in 0..31")


# --- bad files -----------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert_message(str(err.value), f"{path}: file not found, expected a scenario YAML file")


def test_directory(tmp_path):
    with pytest.raises(ScenarioError) as err:
        load_document(tmp_path)
    assert_message(str(err.value), f"{tmp_path}: is a directory, expected a scenario YAML file")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_by_mode(tmp_path):
    path = write(tmp_path, FULL_YAML)
    path.chmod(0)
    with pytest.raises(ScenarioError, match="permission denied"):
        load_document(path)


def test_unreadable_file(tmp_path, monkeypatch):
    path = write(tmp_path, FULL_YAML)

    def deny(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("commsim.yamlio.os.open", deny)
    with pytest.raises(ScenarioError) as err:
        load_document(path)
    assert_message(str(err.value), f"{path}: cannot read the file: permission denied")


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ScenarioError) as err:
        load_document(path)
    assert_message(str(err.value), f"{path}: cannot read the file: expected UTF-8 text, got byte 0xe9 at offset 9")


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("cluster:\n  nodes: 4\n   gpus_per_node: 8\n", "invalid YAML at line 3, column 17"),
        ("a: [1, 2\n", "invalid YAML at line 2, column 1"),
        ("a: 1\nb: {x: 1\n", "invalid YAML at line 3"),
        ("steps: 5\nsteps: 6\n", "invalid YAML at line 2, column 1: duplicate key 'steps'"),
        ("a: *nowhere\n", "invalid YAML at line 1"),
        ("a: 1\n---\nb: 2\n", "invalid YAML at line 2"),
        ("a: \x07\n", "invalid YAML"),
    ],
)
def test_invalid_yaml(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        load_document(path)
    assert_message(str(err.value), f"{path}: ", fragment)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "~\n"])
def test_empty_document(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        load_document(path)
    assert_message(str(err.value), f"{path}: empty document, expected a mapping with at least cluster, model and compute")


@pytest.mark.parametrize(
    "text, given", [("- a\n- b\n", "got ['a', 'b'] (a list)"), ("42\n", "got 42"), ("hello\n", "got 'hello'")]
)
def test_non_mapping_document(tmp_path, text, given):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        load_document(path)
    assert_message(str(err.value), f"{path}: expected a mapping at the top level", given)


def test_non_mapping_passed_to_parse_scenario():
    assert_message(error_of([1, 2]), f"{SRC}: expected a mapping with keys name, ", "got [1, 2] (a list)")


# --- bad values: path, expectation, given value --------------------------------------------------


def mutate(path: str, value):
    """A full scenario with one key path set to `value` (or removed when value is DELETE)."""
    doc = full_doc()
    *parents, last = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    node = doc
    for tok in parents:
        node = node[int(tok[1:-1])] if tok.startswith("[") else node[tok]
    key = int(last[1:-1]) if last.startswith("[") else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return doc


DELETE = object()

BAD = [
    # unknown keys, with the closest valid key suggested
    ("nmae", "x", "nmae", "unknown key (did you mean 'name'?)", "expected one of name, description, seed"),
    ("cluster.nodse", 3, "cluster.nodse", "did you mean 'nodes'?", "expected one of nodes, gpus_per_node"),
    ("cluster.intra_node.bandwith", "1 GB/s", "cluster.intra_node.bandwith", "did you mean 'bandwidth'?", "expected one of bandwidth, latency"),
    ("bucket_cap", "4 GB", "bucket_cap", "did you mean 'ddp.bucket_cap'?", "expected one of name"),
    ("stragglers[0].factr", 2, "stragglers[0].factr", "did you mean 'factor'?", "expected one of kind, ranks, factor"),
    ("stragglers[2].ranks_", 2, "stragglers[2].ranks_", "did you mean 'ranks'?", "expected one of kind, ranks, distribution, cv"),
    # required keys
    ("cluster", DELETE, "cluster", "required key is missing", "expected a mapping with nodes"),
    ("model", DELETE, "model", "required key is missing", "parameters"),
    ("compute", DELETE, "compute", "required key is missing", "forward and backward"),
    ("cluster.nodes", DELETE, "cluster.nodes", "required key is missing", "expected a whole number"),
    ("cluster.gpus_per_node", DELETE, "cluster.gpus_per_node", "required key is missing", "expected a whole number"),
    ("cluster.intra_node.bandwidth", DELETE, "cluster.intra_node.bandwidth", "required key is missing", "expected a rate like '100 Gbps'"),
    ("cluster.inter_node", DELETE, "cluster.inter_node", "required key is missing", "bandwidth"),
    ("model.parameters", DELETE, "model.parameters", "required key is missing", "expected a whole number like 1e9"),
    ("compute.forward", DELETE, "compute.forward", "required key is missing", "expected a time like '5 us'"),
    ("compute.backward", DELETE, "compute.backward", "required key is missing", "expected a time"),
    ("stragglers[1].clock_fraction", DELETE, "stragglers[1].clock_fraction", "required key is missing", "(0, 1]"),
    ("stragglers[0].kind", DELETE, "stragglers[0].kind", "required key is missing", "expected one of slow_rank, throttle, jitter, stall, slow_link"),
    # wrong types
    ("name", 5, "name", "expected a non-empty name", "got 5"),
    ("name", "", "name", "expected a non-empty name", "got ''"),
    ("description", ["a"], "description", "expected text", "got ['a'] (a list)"),
    ("cluster", [1], "cluster", "expected a mapping with keys nodes", "got [1] (a list)"),
    ("ddp", None, "ddp", "expected a mapping with keys bucket_cap", "got null"),
    ("cluster.intra_node", "fast", "cluster.intra_node", "expected a mapping with bandwidth", "got 'fast'"),
    ("cluster.nodes", "four", "cluster.nodes", "expected a whole number", "got 'four'"),
    ("cluster.nodes", 2.5, "cluster.nodes", "expected a whole number", "got 2.5 (not a whole number)"),
    ("cluster.nodes", True, "cluster.nodes", "expected a whole number", "got true (a boolean)"),
    ("ddp.overlap", "yes please", "ddp.overlap", "expected true or false", "got 'yes please'"),
    ("ddp.overlap", 1, "ddp.overlap", "expected true or false", "got 1"),
    ("model.grad_dtype", "fp64", "model.grad_dtype", "expected one of fp32, bf16, fp16", "got 'fp64' (did you mean 'fp16'?)"),
    ("collective.algorithm", "trees", "collective.algorithm", "expected one of ring, tree", "got 'trees'"),
    ("ddp.sharding", "zero3", "ddp.sharding", "expected one of none, zero2, fsdp", "got 'zero3' (did you mean 'zero2'?)"),
    ("ddp.sharding", True, "ddp.sharding", "expected one of none, zero2, fsdp", "got true (a boolean)"),
    # the full document accumulates 2 micro-batches: not modeled with sharding
    ("ddp.sharding", "zero2", "ddp.sharding", "expected gradient_accumulation 1 with sharding zero2", "got gradient_accumulation 2"),
    ("stragglers", {"kind": "jitter"}, "stragglers", "expected a list of mappings, each with a kind", "(a mapping)"),
    ("stragglers[0]", "slow", "stragglers[0]", "expected a mapping with a kind", "got 'slow'"),
    ("stragglers[0].kind", "slowrank", "stragglers[0].kind", "expected one of slow_rank, throttle", "got 'slowrank' (did you mean 'slow_rank'?)"),
    ("stragglers[2].distribution", "cauchy", "stragglers[2].distribution", "expected one of lognormal, normal, gamma, exponential", "got 'cauchy'"),
    ("stragglers[0].ranks", "3", "stragglers[0].ranks", "expected a rank in 0..31", "got '3'"),
    ("stragglers[0].ranks", [1, True], "stragglers[0].ranks[1]", "expected a rank in 0..31", "got true (a boolean)"),
    # zero or negative sizes, rates, times, counts
    ("ddp.bucket_cap", 0, "ddp.bucket_cap", "expected a positive size (> 0)", "got 0"),
    ("ddp.first_bucket", "-1 MB", "ddp.first_bucket", "expected a positive size (> 0)", "got '-1 MB'"),
    ("cluster.inter_node.bandwidth", "0 Gbps", "cluster.inter_node.bandwidth", "expected a positive rate (> 0)", "got '0 Gbps'"),
    ("cluster.intra_node.latency", "-1 us", "cluster.intra_node.latency", "expected a non-negative time (>= 0)", "got '-1 us'"),
    ("compute.forward", 0, "compute.forward", "expected a positive time (> 0)", "got 0"),
    ("compute.optimizer", "-5 ms", "compute.optimizer", "expected a non-negative time (>= 0)", "got '-5 ms'"),
    ("compute.batch_size", 0, "compute.batch_size", "expected a positive count (> 0)", "got 0"),
    ("steps", -3, "steps", "expected a positive count (> 0)", "got -3"),
    ("seed", -1, "seed", "expected a non-negative count (>= 0)", "got -1"),
    ("model.parameters", "0", "model.parameters", "expected a positive count (> 0)", "got '0'"),
    ("ddp.gradient_accumulation", 0, "ddp.gradient_accumulation", "expected a positive count", "got 0"),
    ("cluster.nodes", 0, "cluster.nodes", "expected a positive count", "got 0"),
    ("stragglers[1].heat_up", "0 s", "stragglers[1].heat_up", "expected a positive time", "got '0 s'"),
    ("stragglers[3].duration", -2, "stragglers[3].duration", "expected a positive time", "got -2"),
    ("stragglers[3].every", 0, "stragglers[3].every", "expected a positive count", "got 0"),
    # unknown units and units of the wrong kind
    ("ddp.bucket_cap", "25 XB", "ddp.bucket_cap", "expected a size like '25 MB'", "got '25 XB' (unknown unit 'XB')"),
    ("ddp.bucket_cap", "5 us", "ddp.bucket_cap", "expected a size like '25 MB'", "'5 us' is a time"),
    ("cluster.inter_node.bandwidth", "25 MB", "cluster.inter_node.bandwidth", "expected a rate like '100 Gbps'", "'25 MB' is a size"),
    ("cluster.inter_node.latency", "100 Gbps", "cluster.inter_node.latency", "expected a time like '5 us'", "'100 Gbps' is a rate"),
    ("compute.forward", "10 mss", "compute.forward", "expected a time", "got '10 mss' (unknown unit 'mss')"),
    ("model.parameters", "1e9 GB", "model.parameters", "expected a whole number", "'1e9 GB' is a size"),
    # ranks, nodes, probabilities, fractions
    ("stragglers[0].ranks", 32, "stragglers[0].ranks", "expected a rank in 0..31 (world size 32 = 4 nodes x 8 GPUs)", "got 32"),
    ("stragglers[1].ranks", [5, 40], "stragglers[1].ranks[1]", "expected a rank in 0..31 (world size 32", "got 40"),
    ("stragglers[1].ranks", [5, -1], "stragglers[1].ranks[1]", "expected a rank in 0..31", "got -1"),
    ("stragglers[1].ranks", [5, 5], "stragglers[1].ranks[1]", "expected each rank once", "got rank 5 twice"),
    ("stragglers[1].ranks", [], "stragglers[1].ranks", "expected at least one rank (or 'all')", "got [] (an empty list)"),
    ("stragglers[6].rank", 32, "stragglers[6].rank", "expected a rank in 0..31 (world size 32", "got 32"),
    ("stragglers[5].node", 4, "stragglers[5].node", "expected a node in 0..3 (4 nodes)", "got 4"),
    ("stragglers[5].node", "1", "stragglers[5].node", "expected a node in 0..3", "got '1'"),
    ("stragglers[4].probability", 1.5, "stragglers[4].probability", "expected a probability in [0, 1]", "got 1.5"),
    ("stragglers[4].probability", -0.1, "stragglers[4].probability", "expected a probability in [0, 1]", "got -0.1"),
    ("stragglers[4].probability", "often", "stragglers[4].probability", "expected a probability in [0, 1]", "got 'often'"),
    ("stragglers[2].cv", -0.1, "stragglers[2].cv", "expected a coefficient of variation in [0, 10]", "got -0.1"),
    ("stragglers[2].cv", ".nan", "stragglers[2].cv", "expected a coefficient of variation in [0, 10]", "got '.nan'"),
    ("stragglers[1].clock_fraction", 0, "stragglers[1].clock_fraction", "expected a fraction in (0, 1]", "got 0"),
    ("stragglers[1].clock_fraction", 1.2, "stragglers[1].clock_fraction", "expected a fraction in (0, 1]", "got 1.2"),
    ("stragglers[5].factor", 0, "stragglers[5].factor", "expected a fraction in (0, 1]", "got 0"),
    ("stragglers[5].factor", 2, "stragglers[5].factor", "expected a fraction in (0, 1]", "got 2"),
    ("stragglers[0].factor", 0.5, "stragglers[0].factor", "expected a slowdown factor", "in [1, 1e+06], got 0.5"),
    # plausibility limits: a typo must not overflow the engine or exhaust memory
    ("cluster.inter_node.bandwidth", "1e-300", "cluster.inter_node.bandwidth", "expected a rate of at least 1 B/s", "got '1e-300'"),
    ("compute.forward", "1e300", "compute.forward", "expected a time up to 1e+06 s", "got '1e300'"),
    ("cluster.intra_node.latency", "2e6 s", "cluster.intra_node.latency", "expected a time up to 1e+06 s", "got '2e6 s'"),
    ("stragglers[5].factor", 1e-9, "stragglers[5].factor", "expected a fraction in (0, 1] of at least 1e-06", "got 1e-09"),
    ("stragglers[1].clock_fraction", "1e-320", "stragglers[1].clock_fraction", "of at least 1e-06", "got '1e-320'"),
    ("stragglers[0].factor", 1e7, "stragglers[0].factor", "in [1, 1e+06]", "got 10000000.0"),
    ("stragglers[2].cv", 11, "stragglers[2].cv", "expected a coefficient of variation in [0, 10]", "got 11"),
    ("ddp.bucket_cap", 1, "ddp.bucket_cap", "expected at most 1000000 buckets per step", "got 2e+09 B / 1 B = 2e+09 buckets"),
    ("steps", "1e9", "steps", "expected steps x world size up to 1073741824", "got 1000000000 x 32"),
    # exactly one of two keys
    ("stragglers[3].probability", 0.5, "stragglers[3]", "expected exactly one of every or probability", "got both"),
    ("stragglers[3].every", DELETE, "stragglers[3]", "expected exactly one of every or probability", "got neither"),
    ("stragglers[5].rank", 3, "stragglers[5]", "expected exactly one of rank or node", "got both"),
    ("stragglers[6].rank", DELETE, "stragglers[6]", "expected exactly one of rank or node", "got neither"),
]


@pytest.mark.parametrize("key, value, path, expected, given", BAD, ids=[f"{b[0]}={b[1]!r}"[:60] for b in BAD])
def test_bad_value(key, value, path, expected, given):
    text = error_of(mutate(key, value))
    assert_message(text, f"{SRC}: {path}: ", expected, given)


def test_the_issue_example_path():
    text = error_of(mutate("stragglers[1].ranks", [5, 99]))
    assert text == (
        "run.yaml: stragglers[1].ranks[1]: expected a rank in 0..31 "
        "(world size 32 = 4 nodes x 8 GPUs), got 99"
    )


def test_world_size_limit():
    doc = mutate("cluster.nodes", MAX_WORLD_SIZE)
    assert_message(error_of(doc), f"{SRC}: cluster: expected a world size (nodes x gpus_per_node) up to", f"got {MAX_WORLD_SIZE} x 8")


def test_non_string_key():
    doc = full_doc()
    doc["cluster"][3] = "x"
    assert_message(error_of(doc), f"{SRC}: cluster.3: unknown key")


def test_bad_value_in_a_file_names_the_file(tmp_path):
    path = write(tmp_path, FULL_YAML.replace("factor: 1.2", "factor: fast"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).startswith(f"{path}: stragglers[0].factor: expected a slowdown factor")


# --- docs: every YAML example in docs/scenario-format.md loads --------------------------------

DOCS = Path(__file__).resolve().parents[3] / "docs" / "scenario-format.md"


def doc_examples():
    text = DOCS.read_text(encoding="utf-8")
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.S)


def test_docs_have_examples():
    assert len(doc_examples()) >= 6


@pytest.mark.parametrize("example", doc_examples())
def test_docs_example_loads(example):
    doc = yaml.safe_load(example)
    if "cluster" not in doc:  # a fragment, e.g. one straggler: complete it with the minimal scenario
        doc = dict(copy.deepcopy(MINIMAL), **doc)
        doc["cluster"] = dict(doc["cluster"], nodes=4, gpus_per_node=8)
    assert isinstance(parse_scenario(doc, "docs.yaml"), spec.Scenario)


# --- property: anything in, Scenario or ScenarioError out -------------------------------------

_KEYS = [
    "name", "description", "seed", "steps", "cluster", "model", "compute", "ddp", "collective",
    "stragglers", "nodes", "gpus_per_node", "intra_node", "inter_node", "bandwidth", "latency",
    "parameters", "grad_dtype", "forward", "backward", "optimizer", "batch_size", "bucket_cap",
    "first_bucket", "overlap", "gradient_accumulation", "sharding", "algorithm", "kind", "ranks", "factor",
    "heat_up", "throttled_time", "clock_fraction", "phase", "distribution", "cv", "duration",
    "every", "probability", "rank", "node",
]
_STRINGS = [
    "25 MB", "25 MiB", "100 Gbps", "12.5 GB/s", "5 us", "0.5 s", "1e9", "1.0e9", "1_000", "all",
    "ring", "fp32", "bf16", "zero2", "fsdp", "jitter", "slow_rank", "throttle", "stall", "slow_link", "lognormal",
    "-1", "0", "nan", "inf", "", "5 XB", "\u00b5s",
]
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-3, max_value=40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(_STRINGS),
    st.text(max_size=8),
)
_yamlish = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(_KEYS), st.text(max_size=6), st.integers()), children, max_size=5),
    ),
    max_leaves=20,
)


def _paths(node, prefix=()):
    """Every key path into a nested document (to pick one to mutate)."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


def _loads_or_scenario_error(doc):
    try:
        result = parse_scenario(doc, SRC)
    except ScenarioError as err:
        assert "\n" not in str(err) and str(err).startswith(SRC)
    else:
        assert isinstance(result, spec.Scenario)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_yamlish)
def test_arbitrary_documents(doc):
    _loads_or_scenario_error(doc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutations_of_a_valid_scenario(data):
    doc = full_doc()
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(doc) if p]
        target = data.draw(st.sampled_from(paths))
        node = doc
        for tok in target[:-1]:
            node = node[tok]
        if data.draw(st.booleans()) and isinstance(node, dict):
            del node[target[-1]]
        else:
            node[target[-1]] = data.draw(_yamlish)
        if not isinstance(doc, dict):
            break
    _loads_or_scenario_error(doc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    text=st.one_of(
        st.text(max_size=200),
        _yamlish.map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
        st.lists(st.sampled_from(FULL_YAML.splitlines()), max_size=25).map("\n".join),
    ),
    overrides=st.lists(
        st.one_of(st.text(max_size=20), st.builds("{}={}".format, st.sampled_from(_KEYS + ["stragglers[0].factor", "a.b.c"]), st.sampled_from(_STRINGS))),
        max_size=2,
    ),
)
def test_arbitrary_files_and_overrides(tmp_path, text, overrides):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        result = load_scenario(path, overrides)
    except ScenarioError as err:
        assert "\n" not in str(err)
    else:
        assert isinstance(result, spec.Scenario)


def test_exponential_jitter_needs_cv_at_most_one():
    doc = mutate("stragglers[2].distribution", "exponential")
    assert parse_scenario(doc, SRC).stragglers[2] == spec.Jitter(cv=0.05, distribution="exponential")
    doc["stragglers"][2]["cv"] = 1.5
    assert_message(
        error_of(doc),
        f"{SRC}: stragglers[2].cv: expected a coefficient of variation (exponential jitter) in [0, 1]",
        "got 1.5",
    )


def test_a_rank_in_two_throttle_entries():
    doc = full_doc()
    doc["stragglers"].append({"kind": "throttle", "ranks": [0, 6], "heat_up": 1, "throttled_time": 1, "clock_fraction": 0.5})
    assert_message(
        error_of(doc),
        f"{SRC}: stragglers[7].ranks: expected each rank in at most one throttle entry, got rank 6, already in stragglers[1]",
    )


# --- property: whatever the loader accepts, the engine runs --------------------------------------

SMALL = {
    "steps": 3,
    "cluster": {
        "nodes": 2,
        "gpus_per_node": 2,
        "intra_node": {"bandwidth": "300 GB/s"},
        "inter_node": {"bandwidth": "100 Gbps"},
    },
    "model": {"parameters": "1e7"},
    "compute": {"forward": "10 ms", "backward": "20 ms"},
    "ddp": {"bucket_cap": "4 MB", "sharding": "none"},
    "stragglers": [
        {"kind": "slow_rank", "ranks": 1, "factor": 1.5},
        {"kind": "throttle", "ranks": [2], "heat_up": "20 ms", "throttled_time": "10 ms", "clock_fraction": 0.5},
        {"kind": "jitter", "cv": 0.1},
        {"kind": "stall", "ranks": "all", "duration": "5 ms", "every": 2},
        {"kind": "slow_link", "node": 1, "factor": 0.5},
    ],
}

# Edge values for every kind of field: the extremes the loader accepts and a few it rejects.
_EDGE_VALUES = st.one_of(
    st.sampled_from([
        0, 1, 2, 3, -1, 0.5, 1.0, 1e-6, 1e-9, 10, 1e6, 2e6, "1e-300", "1e300", True, None, [], "all",
        "1 B", "1 B/s", "1 ns", "0 s", "1e6 s", "1000000 s", "25 MiB", "4 GB", "10 Gbps", "1e-6",
        "lognormal", "normal", "gamma", "exponential", "fp16", "bf16", "zero2", "fsdp", [0, 1], [3],
    ]),
    st.floats(min_value=-2, max_value=20),
    st.integers(min_value=-1, max_value=5),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_engine_runs_whatever_the_loader_accepts(data):
    from commsim.sim.engine import simulate

    doc = copy.deepcopy(SMALL)
    leaves = [p for p in _paths(doc) if p and not isinstance(_get(doc, p), (dict, list))]
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        target = data.draw(st.sampled_from(leaves))
        _get(doc, target[:-1])[target[-1]] = data.draw(_EDGE_VALUES)
    try:
        scenario = parse_scenario(doc, SRC)
    except ScenarioError:
        return
    if scenario.steps * scenario.world_size > 64 or scenario.model.grad_bytes / scenario.ddp.bucket_cap > 1000:
        return  # valid, just too big for a quick test
    simulate(scenario)
    simulate(scenario.without_stragglers())


def _get(doc, path):
    for tok in path:
        doc = doc[tok]
    return doc


def test_set_null_removes_the_key_so_bucket_sizes_can_replace_the_files_caps(tmp_path):
    # FULL_YAML has bucket_cap and first_bucket: bucket_sizes over them needs them gone, and no
    # key accepts null, so KEY=null takes the key out (a missing one: nothing to take)
    path = write(tmp_path, FULL_YAML)
    sizes = "ddp.bucket_sizes=[1e9, 1e9]"  # 1e9 bf16 gradients = 2e9 bytes
    with pytest.raises(ScenarioError, match=r"got both .*--set ddp.first_bucket=null --set ddp.bucket_cap=null"):
        load_scenario(path, [sizes])
    scenario = load_scenario(path, [sizes, "ddp.first_bucket=null", "ddp.bucket_cap=null", "ddp.nothing=null"])
    assert scenario.ddp.bucket_sizes == (1e9, 1e9)
    assert scenario.ddp.overlap is False and scenario.ddp.gradient_accumulation == 2  # the rest of ddp kept
    doc = apply_overrides(full_doc(), ["compute.optimizer=null"])
    assert "optimizer" not in doc["compute"] and "optimizer" in full_doc()["compute"]
    with pytest.raises(ScenarioError, match=r"\(after --set 'cluster.nodes=null'\): cluster.nodes: required key is missing"):
        load_scenario(path, ["cluster.nodes=null"])


def test_an_index_into_a_list_the_file_leaves_out_says_the_list_is_empty():
    # it once said "expected stragglers to be a list, got {} (a mapping)": a mapping the override made
    doc = full_doc()
    del doc["stragglers"]
    with pytest.raises(ScenarioError) as err:
        apply_overrides(doc, ["stragglers[0].factor=2"])
    assert_message(str(err.value), "stragglers[0]", "expected no index (the list is empty)", "got 0")


def test_an_empty_override_value_stays_an_error_not_a_removal(tmp_path):
    # KEY= forgot its value: the key is not silently dropped to its default
    with pytest.raises(ScenarioError, match=r"\(after --set 'ddp.bucket_cap='\): ddp.bucket_cap: .*got null"):
        load_scenario(write(tmp_path, FULL_YAML), ["ddp.bucket_cap="])


def test_named_source_names_the_set_that_touched_the_key():
    from commsim.scenario.loader import named_source

    sets = ["ddp.sharding=zero2", "stragglers[0].factor=2"]
    assert named_source("s.yaml", "ddp.sharding", sets) == "s.yaml (after --set 'ddp.sharding=zero2')"
    assert named_source("s.yaml", "stragglers", sets) == "s.yaml (after --set 'stragglers[0].factor=2')"
    assert named_source("s.yaml", "model.parameters", sets) == "s.yaml"
    assert named_source("s.yaml", None, sets) == "s.yaml"


@pytest.mark.parametrize("override, path, flag", [
    # a check across keys names the flag that wrote any of its keys, not only the key it is at
    ("model.parameters=9223372036854775807", "ddp.bucket_cap", "model.parameters"),
    ("ddp.bucket_cap=1", "ddp.bucket_cap", "ddp.bucket_cap"),
    ("cluster.nodes=100000", "steps", "cluster.nodes"),
])
def test_a_check_across_keys_names_the_flag_of_either_key(tmp_path, override, path, flag):
    scenario = write(tmp_path, FULL_YAML.replace("steps: 50", "steps: 10000"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario, overrides=[override])
    text = str(err.value)
    assert "\n" not in text and err.value.path == path, text
    assert text.startswith(f"{scenario} (after --set {override!r}): {path}: expected"), text
