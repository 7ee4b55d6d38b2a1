"""Grids: --grid options, grid files, the product; every bad grid is one line, fast."""

from __future__ import annotations

import time

import pytest
import yaml

from commsim.errors import InputError
from commsim.sweep.errors import SweepError
from commsim.sweep.grid import (
    MAX_VALUE_DEPTH,
    Grid,
    combine_grids,
    load_grid_file,
    parse_grid_args,
    parse_grid_option,
    split_top_level,
)


def small_grid() -> Grid:
    return combine_grids([
        parse_grid_option("cluster.nodes=1,2,4"),
        parse_grid_option("cluster.inter_node.bandwidth=25 Gbps,100 Gbps"),
    ])


def test_grid_option_values_are_yaml_and_keep_order():
    g = parse_grid_option("cluster.inter_node.bandwidth=25 Gbps, 100 Gbps ,400 Gbps")
    assert g.keys == ("cluster.inter_node.bandwidth",)
    assert g.values == (("25 Gbps", "100 Gbps", "400 Gbps"),)
    assert parse_grid_option("steps=3,5").values == ((3, 5),)
    assert parse_grid_option("ddp.overlap=true,false").values == ((True, False),)


def test_split_respects_flow_collections_and_quotes():
    assert split_top_level("[],[{kind: jitter, cv: 0.1}],'a,b'") == [
        "[]", "[{kind: jitter, cv: 0.1}]", "'a,b'"]
    g = parse_grid_option("stragglers=[],[{kind: jitter, cv: 0.1}]")
    assert g.values == (([], [{"kind": "jitter", "cv": 0.1}]),)


def test_cartesian_product_last_key_fastest():
    g = small_grid()
    assert len(g) == 6
    pts = g.points()
    assert [(p["cluster.nodes"], p["cluster.inter_node.bandwidth"]) for p in pts] == [
        (1, "25 Gbps"), (1, "100 Gbps"), (2, "25 Gbps"), (2, "100 Gbps"), (4, "25 Gbps"), (4, "100 Gbps")]


def test_grid_file_flat_and_nested_mean_the_same(tmp_path):
    flat = tmp_path / "flat.yaml"
    flat.write_text("cluster.nodes: [1, 2]\ncluster.inter_node.bandwidth: [25 Gbps, 100 Gbps]\n")
    nested = tmp_path / "nested.yaml"
    nested.write_text("cluster:\n  nodes: [1, 2]\n  inter_node:\n    bandwidth: [25 Gbps, 100 Gbps]\n")
    assert load_grid_file(flat) == load_grid_file(nested)
    # --grid accepts files and KEY=V lists together
    both = parse_grid_args([str(flat), "stragglers[0].cv=0.01,0.1"])
    assert both.keys == ("cluster.nodes", "cluster.inter_node.bandwidth", "stragglers[0].cv")
    assert len(both) == 8


def test_nested_grid_file_keeps_document_order(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("a: {x: [1], y: {p: [2], q: [3]}}\nb: [4]\nc: {z: [5]}\n")
    assert load_grid_file(path).keys == ("a.x", "a.y.p", "a.y.q", "b", "c.z")


@pytest.mark.parametrize("arg, fragment", [
    ("cluster.nodes=", "empty list"),
    ("cluster.nodes=1,,2", "empty one"),
    ("cluster.nodes=1,1", "twice"),
    ("nodes", "expected KEY=V1,V2"),
])
def test_bad_grid_options(arg, fragment):
    with pytest.raises(SweepError, match=fragment):
        parse_grid_args([arg])


@pytest.mark.parametrize("text, fragment", [
    ("cluster.nodes: []\n", "empty list"),
    ("cluster.nodes: 4\n", "expected a list of values"),
    ("[1, 2]\n", "expected a mapping"),
    ("", "empty document"),
    ("cluster.nodes: [1, 2\n", "invalid YAML"),
])
def test_bad_grid_files(tmp_path, text, fragment):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    with pytest.raises(SweepError, match=fragment) as err:
        load_grid_file(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("arg", ["steps=(:\n?", "steps={1: a, b: c}", "steps=[{~: 1}]"])
def test_grid_values_with_keys_that_are_not_text_are_one_line_errors(arg):
    # `(:\n?` is a mapping {"(": None, None: None}: its keys could not be sorted into canonical JSON
    with pytest.raises(SweepError, match="a key must be text") as err:
        parse_grid_option(arg)
    assert "\n" not in str(err.value)


def test_key_given_twice_is_rejected():
    with pytest.raises(SweepError, match="more than one grid"):
        parse_grid_args(["cluster.nodes=1,2", "cluster.nodes=4"])


def test_sweep_errors_are_input_errors():
    err = SweepError("src", "a.b", "expected x, got y")
    assert isinstance(err, InputError)
    assert (err.source, err.path, err.message, str(err)) == ("src", "a.b", "expected x, got y", "src: a.b: expected x, got y")


# ---------------------------------------------------------------------------------------
# Hostile grid files and --grid values: one line naming the source, no traceback, fast.

# One value whose last element expands to 9**10 leaves: a few hundred bytes of YAML.
_ANCHORS = ["&a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"] + [
    f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 11)]
BOMB = f"stragglers: [[{', '.join(_ANCHORS)}]]\n"


HOSTILE_FILES = {
    "utf16": "cluster.nodes: [1, 2]\n".encode("utf-16"),
    "deep": ("cluster.nodes: " + "[" * 50_000 + "]" * 50_000 + "\n").encode(),
    "deep_mapping": ("".join(f"{' ' * i}k{i}:\n" for i in range(3000)) + " " * 3000 + "v: [1]\n").encode(),
    "bigint": ("cluster.nodes: [" + "1" * 4301 + "]\n").encode(),
    "bad_int_tag": b"cluster.nodes: [!!int abc]\n",
    "bad_float_tag": b"stragglers[0].cv: [!!float abc]\n",
    "bad_timestamp_tag": b"seed: [!!timestamp abc]\n",
    "python_tag": b"seed: [!!python/object/apply:os.system [ls]]\n",
    "duplicate_key": b"cluster.nodes: [1, 2]\ncluster.nodes: [4]\n",
    "nested_duplicate": b"cluster:\n  nodes: [1]\n  nodes: [2]\n",
    "alias_bomb": BOMB.encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_hostile_grid_files_are_one_line_errors(tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(HOSTILE_FILES[name])
    t0 = time.perf_counter()
    with pytest.raises(SweepError) as err:
        parse_grid_args([str(path)])
    assert time.perf_counter() - t0 < 10  # the alias bomb took minutes to a MemoryError
    text = str(err.value)
    assert text.startswith(str(path)) and "\n" not in text
    assert isinstance(err.value, InputError)


@pytest.mark.parametrize("arg", [
    "steps=" + "1" * 4301,
    "cluster.nodes=2,!!int abc",
    "stragglers[0].cv=!!float abc",
    "seed=!!timestamp abc",
    "stragglers=" + "[" * 50_000 + "]" * 50_000,
    "stragglers=[{a: 1, a: 2}]",
])
def test_hostile_grid_values_are_one_line_errors(arg):
    with pytest.raises(SweepError) as err:
        parse_grid_args([arg])
    text = str(err.value)
    assert text.startswith("--grid ") and "\n" not in text
    assert len(text) < 400  # a 4,301-digit value is not echoed whole


def test_value_nesting_is_bounded():
    ok = "[" * (MAX_VALUE_DEPTH - 1) + "]" * (MAX_VALUE_DEPTH - 1)
    parse_grid_args([f"stragglers={ok}"])
    deep = "[" * (MAX_VALUE_DEPTH + 1) + "]" * (MAX_VALUE_DEPTH + 1)
    with pytest.raises(SweepError, match="nested (at most|more than)"):
        parse_grid_args([f"stragglers={deep}"])


def test_values_that_parse_are_unchanged_by_the_strict_reader():
    for text in ["100 Gbps", "1e9", "3", "0.05", "true", "[]", "[{kind: jitter, cv: 0.1}]", "'yes'", "2024-01-02"]:
        assert parse_grid_option(f"k={text}").values == ((yaml.safe_load(text),),)
