"""Tests for commsim.calibration.file: round trip, strict reading, one-line errors."""

import json
import os

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim.calibration.file import calibration_to_dict
from commsim.calibration import (
    Calibration,
    CalibrationError,
    Measurement,
    Provenance,
    fit_link,
    load_calibration,
    model_time,
    save_calibration,
)

SIZES = [8 * 2**k for k in range(28)]


def synthetic(alpha, beta, n, sizes=SIZES):
    return [Measurement(int(s), float(model_time(alpha, beta, s, n)), n) for s in sizes]


def full_cal():
    from commsim.calibration.records import ComputeTiming, RankCompute, SourceFile

    prov = Provenance(
        backend="gloo", world_size=2, hostnames=("h1",), torch_version="2.13.0", nccl_version=None,
        gloo_version="gloo (torch 2.13.0)", date="2026-11-30T08:00:00Z", command="commsim calibrate --backend gloo",
        sources=(SourceFile("a.txt", "ab" * 32, "./all_reduce_perf -b 8"),),
    )
    compute = ComputeTiming(1000, 4, 0.01, 0.02, (RankCompute(0, 0.01, 0.02), RankCompute(1, 0.011, 0.021)))
    return Calibration((fit_link("intra_node", synthetic(2e-6, 3e9, 2)),), prov, compute)


def test_save_load_round_trip(tmp_path):
    cal = full_cal()
    path = tmp_path / "cal.yaml"
    save_calibration(cal, path)
    assert load_calibration(path) == cal
    # the file is plain YAML with the documented top-level keys, and no temp file is left
    doc = yaml.safe_load(path.read_text())
    assert list(doc) == ["format", "provenance", "levels", "compute"]
    assert [p.name for p in tmp_path.iterdir()] == ["cal.yaml"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_job_across_hosts_keeps_its_layout(tmp_path):
    from dataclasses import replace

    cal = full_cal()
    across = replace(cal, provenance=replace(cal.provenance, hostnames=("h1", "h2"), ranks_per_node=(1, 1)))
    path = tmp_path / "cal.yaml"
    save_calibration(across, path)
    assert load_calibration(path).provenance.ranks_per_node == (1, 1)
    assert yaml.safe_load(path.read_text())["provenance"]["ranks_per_node"] == [1, 1]
    # unknown layout: no key written, () read back
    save_calibration(cal, path)
    assert "ranks_per_node" not in yaml.safe_load(path.read_text())["provenance"]
    assert load_calibration(path).provenance.ranks_per_node == ()


@pytest.mark.parametrize("counts, msg", [
    ([1, 2], r"provenance.ranks_per_node: expected counts summing to world_size 2"),
    ([2, 0], r"provenance.ranks_per_node\[1\]"),
    ("two", r"provenance.ranks_per_node"),
])
def test_bad_ranks_per_node(tmp_path, counts, msg):
    doc = calibration_to_dict(full_cal())
    doc["provenance"]["ranks_per_node"] = counts
    with pytest.raises(CalibrationError, match=msg) as err:
        load_calibration(_write(tmp_path, doc))
    assert "\n" not in str(err.value)


def _write(tmp_path, doc):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(json.loads(json.dumps(doc))) if not isinstance(doc, str) else doc)
    return p


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (lambda d: d.update(format="other/1"), "format: expected"),
        (lambda d: d.update(extra=1), "unknown key 'extra'"),
        (lambda d: d["levels"]["intra_node"].update(alpha_s=-1.0), r"levels.intra_node.alpha_s: expected a finite number >= 0"),
        (lambda d: d["levels"]["intra_node"].update(beta_Bps="fast"), r"levels.intra_node.beta_Bps"),
        (lambda d: d["levels"].update(nvlink=d["levels"]["intra_node"]), r"levels: expected level names"),
        (lambda d: d["levels"]["intra_node"]["table"]["rows"][0].__setitem__(1, 0), r"rows\[0\]\[1\] \(time_s\)"),
        (lambda d: d["levels"]["intra_node"]["table"]["rows"][3].__setitem__(3, 1.0), r"rows\[3\]\[3\] \(busbw_Bps\)"),
        (lambda d: d["levels"]["intra_node"]["table"]["rows"].reverse(), "must be sorted"),
        (lambda d: d["provenance"].pop("backend"), "missing key 'backend'"),
        (lambda d: d["compute"].update(forward_s=None), "compute.forward_s"),
        (lambda d: d["levels"]["intra_node"]["ranges"][0].update(beta_Bps=0), r"ranges\[0\].beta_Bps"),
        (lambda d: d["levels"]["intra_node"].update(ranges=[]), r"levels.intra_node.ranges: expected a non-empty list"),
        # past the scenario's limits (a duration of 1e6 s, a rate of 1 B/s): 300-digit and
        # infinite times were printed instead
        (lambda d: d["levels"]["intra_node"]["ranges"][0].update(alpha_s=1e300),
         r"ranges\[0\].alpha_s: expected a finite number >= 0 and <= 1e\+06, got 1e\+300"),
        (lambda d: d["levels"]["intra_node"]["ranges"][0].update(beta_Bps=1e-300),
         r"ranges\[0\].beta_Bps: expected a finite number >= 1, got 1e-300"),
        (lambda d: d["levels"]["intra_node"].update(alpha_s=1e7), r"levels.intra_node.alpha_s: expected a finite number >= 0 and <= 1e\+06"),
        (lambda d: d["levels"]["intra_node"].update(beta_Bps=0.5), r"levels.intra_node.beta_Bps: expected a finite number >= 1"),
    ],
)
def test_bad_files_raise_one_line_errors(tmp_path, mutate, msg):
    doc = calibration_to_dict(full_cal())
    mutate(doc)
    with pytest.raises(CalibrationError, match=msg) as exc:
        load_calibration(_write(tmp_path, doc))
    assert "\n" not in str(exc.value) and str(tmp_path) in str(exc.value)


def test_unreadable_and_non_yaml_files(tmp_path):
    with pytest.raises(CalibrationError, match="cannot read"):
        load_calibration(tmp_path / "missing.yaml")
    with pytest.raises(CalibrationError, match="invalid YAML at line 2, column 1"):
        load_calibration(_write(tmp_path, "a: [1, 2\n"))
    with pytest.raises(CalibrationError, match="expected a mapping"):
        load_calibration(_write(tmp_path, "- 1\n"))


def test_non_utf8_file_is_a_one_line_error(tmp_path):
    bad = tmp_path / "cal.yaml"
    bad.write_bytes(b"format: 1\n\xff\xfe\x00garbage\n")
    with pytest.raises(CalibrationError, match=r"cal\.yaml: cannot read calibration file: expected UTF-8 text, got byte 0xff"):
        load_calibration(bad)


def test_run_with_a_non_utf8_calibration_exits_2(tmp_path, capsys):
    from commsim.cli.main import run_cli

    bad = tmp_path / "cal.yaml"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    root = str(Path(__file__).resolve().parents[3])
    code = run_cli(["run", os.path.join(root, "scenarios", "validate_gloo_2rank.yaml"), "-q", "--steps", "2",
                    "--calibration", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "expected UTF-8 text" in err and str(bad) in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("epoch", ["9" * 30, "253402300800", "99999999999999999"])
def test_source_date_epoch_out_of_range_is_a_one_line_error(epoch, monkeypatch):
    from commsim.calibration.file import utc_now_iso

    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    with pytest.raises(CalibrationError, match=f"SOURCE_DATE_EPOCH: expected .* got '{epoch}'"):
        utc_now_iso()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert utc_now_iso() == "2023-11-14T22:13:20Z"


def test_yaml11_exponent_without_dot_is_a_number(tmp_path):
    # PyYAML (YAML 1.1) reads `1e-6` as the string '1e-6'; a hand-written file means the number
    import re

    path = tmp_path / "cal.yaml"
    save_calibration(full_cal(), path)
    text = re.sub(r"(?m)^(  intra_node:\n    alpha_s:) .*$", r"\1 1e-6", path.read_text(), count=1)
    text = re.sub(r"(?m)^(    beta_Bps:) .*$", r"\1 3e9", text, count=1)
    assert "alpha_s: 1e-6\n    beta_Bps: 3e9\n" in text and yaml.safe_load(text)["levels"]["intra_node"]["alpha_s"] == "1e-6"
    path.write_text(text)
    lv = load_calibration(path).level("intra_node")
    assert (lv.alpha_s, lv.beta_Bps) == (1e-6, 3e9)


@pytest.mark.parametrize("value", ["fast", "nan", "inf", "1e400", "-1e-6"])
def test_strings_that_are_no_finite_number_stay_errors(tmp_path, value):
    doc = calibration_to_dict(full_cal())
    doc["levels"]["intra_node"]["alpha_s"] = value
    with pytest.raises(CalibrationError, match=r"levels.intra_node.alpha_s: expected a finite number"):
        load_calibration(_write(tmp_path, doc))


def _three_ranges():
    doc = calibration_to_dict(full_cal())
    doc["levels"]["intra_node"]["ranges"] = [
        {"min_size_bytes": 8, "max_size_bytes": 1024, "alpha_s": 2e-6, "beta_Bps": 3e9},
        {"min_size_bytes": 2048, "max_size_bytes": 2**20, "alpha_s": 2e-6, "beta_Bps": 3e9},
        {"min_size_bytes": 2**21, "alpha_s": 2e-6, "beta_Bps": 3e9},
    ]
    return doc


@pytest.mark.parametrize("index,max_size", [(0, 2048), (0, 4096), (1, 2**21), (1, 2**30)])
def test_overlapping_ranges_are_rejected(tmp_path, index, max_size):
    doc = _three_ranges()
    load_calibration(_write(tmp_path, doc))  # disjoint: fine
    doc["levels"]["intra_node"]["ranges"][index]["max_size_bytes"] = max_size
    with pytest.raises(CalibrationError, match=rf"ranges\[{index}\].max_size_bytes: expected less than the next"):
        load_calibration(_write(tmp_path, doc))


# --- hostile files: every one is a one-line CalibrationError, quickly --------------------------


def _dump(doc):
    return yaml.safe_dump(json.loads(json.dumps(doc)))


def _saved_text(tmp_path):
    path = tmp_path / "good.yaml"
    save_calibration(full_cal(), path)
    return path.read_text()


def _load_text(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CalibrationError) as exc:
        load_calibration(path)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ") and len(msg) < 400, msg
    return msg


@pytest.mark.parametrize("key", ["format", "provenance", "levels", "alpha_s", "backend"])
def test_duplicate_keys_are_refused(tmp_path, key):
    # PyYAML keeps the last of two equal keys; a hand edit that adds a second alpha_s would win silently
    text = _saved_text(tmp_path)
    lines = text.splitlines(keepends=True)
    i = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f"{key}:"))
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    duplicate = f"{indent}{key}: 1\n"
    msg = _load_text(tmp_path, "".join(lines[:i] + [duplicate] + lines[i:]))
    assert f"duplicate key '{key}'" in msg


@pytest.mark.parametrize("value,says", [
    ("!!int abc", "invalid YAML: a value that does not fit its type (invalid literal for int()"),
    ("!!float x", "invalid YAML: a value that does not fit its type (could not convert string to float"),
    ("!!timestamp x", "invalid YAML: a value that does not fit its explicit tag"),
    ("!!bool maybe", "invalid YAML: a value that does not fit its explicit tag"),
    ("!!python/object:os.system x", "invalid YAML at line 6, column 14: could not determine a constructor"),
    ("!!str [1]", "invalid YAML at line 6, column 14: expected a scalar node"),
    ("1" * 5000, "invalid YAML: an integer with too many digits"),
])
def test_explicit_tags_with_bad_content_and_huge_literals(tmp_path, value, says):
    text = _saved_text(tmp_path).replace("  intra_node:\n    alpha_s: ", f"  intra_node:\n    alpha_s: {value} #", 1)
    assert value in text
    msg = _load_text(tmp_path, text)
    # the wording is the reader's (commsim.yamlio may come to say these itself): an invalid-YAML line
    assert says in msg or msg.startswith(f"{tmp_path / 'bad.yaml'}: invalid YAML"), msg


def test_a_hex_integer_past_int_limits_is_refused_at_its_key(tmp_path):
    # 0x and 5,000 hex digits: an int YAML builds fine (the digit limit is for decimal), 6,021 digits long
    text = _saved_text(tmp_path).replace("  intra_node:\n    alpha_s: ", "  intra_node:\n    alpha_s: 0x" + "f" * 5000 + " #", 1)
    msg = _load_text(tmp_path, text)
    # refused by the reader (at its line, commsim.yamlio's digit limit covers hex too) or at its key
    assert msg == f"{tmp_path / 'bad.yaml'}: invalid YAML at line 20, column 14: expected an integer of at most 4300 digits, got one of 5002 digits" \
        or msg.endswith("levels.intra_node.alpha_s: expected a finite number >= 0, got an integer of 6021 digits"), msg


@pytest.mark.parametrize("key,where", [
    ("alpha_s", "levels.intra_node.alpha_s"),
    ("beta_Bps", "levels.intra_node.beta_Bps"),
])
def test_400_digit_numbers_are_one_line_errors(tmp_path, key, where):
    # a 400-digit integer is an int to YAML and past any float: float() overflows
    doc = calibration_to_dict(full_cal())
    doc["levels"]["intra_node"][key] = 10**400
    msg = _load_text(tmp_path, _dump(doc))
    assert f"{where}: expected a finite number" in msg and "got an integer of 401 digits" in msg


@pytest.mark.parametrize("column,where", [(0, "size_bytes"), (4, "world_size")])
def test_integers_past_2_to_53_are_refused(tmp_path, column, where):
    doc = calibration_to_dict(full_cal())
    doc["levels"]["intra_node"]["table"]["rows"][0][column] = 10**400
    msg = _load_text(tmp_path, _dump(doc))
    assert f"rows[0][{column}] ({where}): expected an integer <= 2^53" in msg


def test_tiny_time_with_an_infinite_bandwidth_is_refused(tmp_path):
    doc = calibration_to_dict(full_cal())
    row = doc["levels"]["intra_node"]["table"]["rows"][0]
    row[1:4] = [1e-320, float("inf"), float("inf")]
    msg = _load_text(tmp_path, _dump(doc))
    assert "rows[0][1] (time_s): expected a time for which size/time is a finite bandwidth" in msg


@pytest.mark.parametrize("key", ["format", "rows"])
def test_deep_nesting_is_a_one_line_error(tmp_path, key):
    # 50,000 nested lists: the YAML composer recurses once per level
    deep = "[" * 50_000 + "]" * 50_000
    doc = calibration_to_dict(full_cal())
    if key == "rows":
        doc["levels"]["intra_node"]["table"]["rows"] = "DEEP"
    else:
        doc[key] = "DEEP"
    text = _dump(doc).replace("DEEP", deep)
    assert "nested more than 50 levels deep" in _load_text(tmp_path, text)


def _bomb(levels):
    """A YAML alias bomb in one flow value: `levels` lists of 9 aliases of the one before."""
    defs = ["&a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for p, c in zip("abcdefghij", "bcdefghijk"[: levels - 1]):
        defs.append(f"&{c} [" + ", ".join([f"*{p}"] * 9) + "]")
    return "[" + ", ".join(defs) + "]"


@pytest.mark.parametrize("where", ["format", "provenance.hostnames", "provenance.sources", "levels.intra_node.table.rows",
                                   "levels.intra_node.table.columns", "levels.intra_node.ranges", "compute"])
def test_alias_bomb_is_a_quick_one_line_error(tmp_path, where):
    # 6 levels of 9 aliases: half a million "lol"s to anything that walks the value (a repr() in
    # the message did); the message shows a few items, or the reader refuses the aliases
    import time

    doc = calibration_to_dict(full_cal())
    node = doc
    *parents, last = where.split(".")
    for k in parents:
        node = node[k]
    node[last] = "BOMB"
    text = _dump(doc).replace("BOMB", _bomb(6))
    t0 = time.perf_counter()
    msg = _load_text(tmp_path, text)
    assert time.perf_counter() - t0 < 5
    assert where.split(".")[-1] in msg or "alias" in msg


def test_utf16_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "cal16.yaml"
    path.write_bytes(_saved_text(tmp_path).encode("utf-16"))
    with pytest.raises(CalibrationError, match=r"cannot read calibration file: expected UTF-8 text, got UTF-16 text \(save it as UTF-8\)"):
        load_calibration(path)


def test_shown_values_are_bounded():
    from commsim.calibration.file import show

    nested = []
    node = nested
    for _ in range(50_000):
        node.append([])
        node = node[0]
    assert len(show(nested)) < 40
    assert len(show("x" * 10**6)) < 80 and show(16**5000) == "an integer of 6021 digits"
    assert show([1, 2**200]) == "[1, an integer of 61 digits]" and show(2**100) == repr(2**100)


# Arbitrary text, and a valid file with lines replaced, dropped or repeated: load_calibration
# gives a Calibration or a one-line CalibrationError, never any other exception.
_VALID = None


def _valid_lines():
    global _VALID
    if _VALID is None:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "cal.yaml"
            save_calibration(full_cal(), p)
            _VALID = p.read_text().splitlines()
    return _VALID


_VALUES = ["", "-", "[", "]", "{", "}", "&a 1", "*a", "*nope", "!!int x", "!!float x", "!!binary x", "!!binary AAAA",
           "!!timestamp 1", "!!timestamp 2024-13-45", "!!bool maybe", "!!str [1]", "!!python/name:os.system", "1e400",
           "-1", "0", "-0.0", "2e-320", "1e-6", "nan", ".inf", "~", "null", "yes", "9" * 400, "0x" + "f" * 400, "'",
           "[]", "{}", "[1, 2]", "[1, 2", "{a: 1}", "{a: 1, a: 2}", "2024-01-01", "[[[[[[[[1]]]]]]]]", "? x", "a: b: c"]
_VALUE = st.one_of(
    st.sampled_from(_VALUES),
    st.integers(-10**500, 10**500).map(str),
    st.floats().map(repr),
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12),
)


def _mutated(edits):
    lines = list(_valid_lines())
    for kind, index, text in edits:
        if not lines:
            break
        i = index % len(lines)
        if kind == 0:
            lines[i] = text
        elif kind == 1:
            del lines[i]
        elif kind == 2:
            lines.insert(i, lines[i])
        elif kind == 3 and lines[i].lstrip().startswith("- ["):  # one cell of a table row
            cells = lines[i].split("[", 1)[1].rstrip("]").split(", ")
            cells[index % len(cells)] = text
            lines[i] = lines[i].split("[", 1)[0] + "[" + ", ".join(cells) + "]"
        else:  # keep the key, change the value
            key = lines[i].split(":", 1)[0]
            lines[i] = f"{key}: {text}"
    return "\n".join(lines) + "\n"


_EDIT = st.tuples(st.sampled_from([0, 1, 2, 3, 3, 4, 4, 4]), st.integers(0, 10**6), _VALUE)


@settings(max_examples=250, deadline=None)
@given(text=st.one_of(st.text(max_size=300), st.lists(_EDIT, min_size=1, max_size=3).map(_mutated)))
def test_load_calibration_on_arbitrary_text(text):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "cal.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            cal = load_calibration(path)
        except CalibrationError as exc:
            msg = str(exc)
            assert msg.startswith(f"{path}: ") and "\n" not in msg and "\r" not in msg, msg
        else:
            assert isinstance(cal, Calibration)
