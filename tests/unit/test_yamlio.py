"""Tests for commsim.yamlio: the one YAML reader, its file checks and its limits."""

from __future__ import annotations

import codecs
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from commsim.errors import InputError, ScenarioError
from commsim.yamlio import (
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    MAX_INPUT_BYTES,
    MAX_INT_DIGITS,
    load_yaml_file,
    parse_yaml,
    read_text_file,
)

ROOT = Path(__file__).resolve().parents[2]
SRC = "in.yaml"

# 342 bytes: 9 levels of 9 aliases each, 9**9 = 387,420,489 strings once expanded.
ALIAS_BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip([None] + list("abcdefgh"), "abcdefghi")
)


def error_of(text: str, source: str = SRC) -> str:
    with pytest.raises(InputError) as err:
        parse_yaml(text, source)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{source}: ")
    return message


def run_isolated(code: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run Python code in a child (this checkout's commsim) with a hard timeout: a reader that
    blocks fails the test instead of hanging the suite."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


# --- what parses ---------------------------------------------------------------------------------


def test_plain_documents():
    assert parse_yaml("a: 1\nb: [x, 2.5, true, null]\n", SRC) == {"a": 1, "b": ["x", 2.5, True, None]}
    assert parse_yaml("", SRC) is None


def test_anchors_and_aliases_reuse_a_value():
    doc = parse_yaml("a: &link {bandwidth: 1 GB/s}\nb: *link\n", SRC)
    assert doc["a"] == doc["b"] == {"bandwidth": "1 GB/s"}


def test_merge_keys_yield_to_explicit_keys():
    doc = parse_yaml("base: &b {x: 1, y: 2}\nthing:\n  <<: *b\n  x: 3\n", SRC)
    assert doc["thing"] == {"x": 3, "y": 2}


def test_earlier_merged_mappings_win():
    doc = parse_yaml("a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc: {<<: [*a, *b]}\n", SRC)
    assert doc["c"] == {"x": 1, "y": 2}


def test_valid_tags():
    doc = parse_yaml("a: !!int '12'\nb: !!float '1.5'\nc: !!str 12\nd: !!timestamp 2020-12-31\ne: 0x1f\n", SRC)
    assert doc["a"] == 12 and doc["b"] == 1.5 and doc["c"] == "12" and doc["d"].month == 12 and doc["e"] == 31


def test_load_yaml_file(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("a: 1\n")
    assert load_yaml_file(path, "a test file") == {"a": 1}


# --- duplicate keys, tags, numbers ----------------------------------------------------------------


def test_duplicate_keys():
    assert error_of("a: 1\nb: 2\na: 3\n") == f"{SRC}: invalid YAML at line 3, column 1: duplicate key 'a'"


@pytest.mark.parametrize("text, message", [
    ("1: a\nb: c\n", "line 1, column 1: a key must be text, got '1', which YAML reads as an integer; quote it"),
    ("a: 1\n~: 2\n", "line 2, column 1: a key must be text, got '~', which YAML reads as null; quote it"),
    ("{on: 1}", "a key must be text, got 'on', which YAML reads as true/false; quote it"),
    ("? [1]\n: 2\n", "a key must be text, got a sequence"),
])
def test_keys_are_text(text, message):
    # YAML 1.1 reads these keys as int/None/bool; a mapping mixing them with text keys cannot be
    # sorted (the sweep's canonical JSON raised TypeError on `(:\n?`, found by hypothesis in CI)
    error = error_of(text)
    assert message in error and error.startswith(f"{SRC}: invalid YAML at line "), error
    assert parse_yaml("'1': a\n'on': b\n", SRC) == {"1": "a", "on": "b"}


def test_duplicate_keys_after_a_merge_are_still_refused():
    assert "duplicate key 'x'" in error_of("b: &b {y: 1}\nc: {<<: *b, x: 1, x: 2}\n")


@pytest.mark.parametrize(
    "text, message",
    [
        ("steps: !!int abc", "line 1, column 8: expected a valid !!int value, got 'abc'"),
        ("x: !!int ''", "line 1, column 4: expected a valid !!int value, got ''"),
        ("x: !!float x", "line 1, column 4: expected a valid !!float value, got 'x'"),
        ("x: !!bool maybe", "line 1, column 4: expected a valid !!bool value, got 'maybe'"),
        ("x: !!timestamp 2020-13-45",
         "line 1, column 4: expected a valid !!timestamp value, got '2020-13-45' (month must be in 1..12)"),
        ("x: !!timestamp abc", "line 1, column 4: expected a valid !!timestamp value, got 'abc'"),
        ("x: 2020-02-30", "line 1, column 4: expected a valid !!timestamp value, got '2020-02-30' (day is out of range"),
        ("x: !!binary 'abc'", "line 1, column 4: failed to decode base64 data"),
        ("x: !!python/object/apply:os.system [ls]", "could not determine a constructor for the tag"),
        ("x: !!python/name:os.system ''", "could not determine a constructor for the tag"),
        ("x: !custom 1", "could not determine a constructor for the tag '!custom'"),
        ("x: !!seq abc", "expected a sequence node, but found scalar"),
        ("x: !!str [1]", "expected a scalar node, but found sequence"),
        ("x: !!omap [1]", "expected a mapping of length 1, but found scalar"),
        ("? [a]\n: 1\n", "a key must be text, got a sequence"),
    ],
)
def test_bad_tag_content_is_one_line(text, message):
    assert message in error_of(text)


def test_full_width_digits_in_number_tags():
    assert "expected a valid !!int value (ASCII digits 0-9), got '\uff12'" in error_of("x: !!int \uff12")
    assert "expected a valid !!float value (ASCII digits 0-9)" in error_of("x: !!float \uff12.\uff15")
    # untagged, it is text (YAML's digits are 0-9): the field parsers refuse it as a number
    assert parse_yaml("nodes: \uff12", SRC) == {"nodes": "\uff12"}


def test_integer_digit_limit():
    assert parse_yaml("x: " + "9" * MAX_INT_DIGITS, SRC) == {"x": int("9" * MAX_INT_DIGITS)}
    message = error_of("x: " + "9" * (MAX_INT_DIGITS + 1))
    assert message.endswith(f"line 1, column 4: expected an integer of at most 4300 digits, got one of {MAX_INT_DIGITS + 1} digits")
    assert "at most 4300 digits, got one of 5000 digits" in error_of("x: !!int " + "1" * 5000)


@pytest.mark.parametrize("text", ["x: 0x" + "f" * 5000, "x: 0b" + "1" * 20000, "x: -0x" + "f" * 3600,
                                  "x: 1:" + "59:" * 3000 + "1"])
def test_huge_integers_in_other_bases(text):
    assert "expected an integer of at most 4300 digits" in error_of(text)


# --- structure limits -----------------------------------------------------------------------------


def test_alias_bomb_is_refused_fast():
    assert len(ALIAS_BOMB) < 544
    start = time.perf_counter()
    message = error_of(ALIAS_BOMB)
    assert time.perf_counter() - start < 5  # measured 6 ms; unguarded consumers take minutes
    assert message.endswith("aliases expand to more than 100,000 nodes (an alias bomb?)")


def test_alias_expansion_limit_is_exact():
    # an anchored list of 999 items is 1,000 nodes; each alias to it adds 1,000
    anchor = "a: &a [" + ", ".join(["1"] * 999) + "]\n"
    at_limit = anchor + "b: [" + ", ".join(["*a"] * (MAX_ALIAS_NODES // 1000)) + "]\n"
    assert len(parse_yaml(at_limit, SRC)["b"]) == MAX_ALIAS_NODES // 1000
    over = anchor + "b: [" + ", ".join(["*a"] * (MAX_ALIAS_NODES // 1000 + 1)) + "]\n"
    assert "aliases expand to more than" in error_of(over)


def test_merge_key_bomb():
    levels = ["l0: &l0 {k: v}"] + [f"l{i}: &l{i} {{<<: [{', '.join([f'*l{i - 1}'] * 9)}]}}" for i in range(1, 9)]
    assert "aliases expand to more than" in error_of("\n".join(levels) + "\n")


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: *a}\n", "a: &a [1, [2, *a]]\n"])
def test_recursive_aliases(text):
    assert "the alias *a is inside its own anchor &a (a recursive structure)" in error_of(text)


def test_undefined_alias():
    assert "found undefined alias 'x'" in error_of("a: *x\n")


def test_depth_limit_is_exact():
    assert parse_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, SRC) is not None
    assert error_of("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)).endswith(
        f"line 1, column {MAX_DEPTH + 1}: nested more than {MAX_DEPTH} levels deep"
    )


@pytest.mark.parametrize(
    "text",
    [
        "[" * 50_000,
        "{a: " * 50_000,
        "".join(" " * i + "a:\n" for i in range(500)),
        "- " * 50_000 + "x",
    ],
    ids=["flow-lists", "flow-mappings", "block-mappings", "block-lists"],
)
def test_deep_nesting_is_refused_without_recursion_error(text):
    start = time.perf_counter()
    assert f"nested more than {MAX_DEPTH} levels deep" in error_of(text)
    assert time.perf_counter() - start < 10


def test_text_size_limit():
    assert "expected at most 1,048,576 characters of YAML, got 1,048,577 in the value" in str(
        pytest.raises(InputError, parse_yaml, "#" * (MAX_INPUT_BYTES + 1), SRC, " in the value").value
    )


def test_control_character_position():
    assert error_of("a: 1\nb: x\x07y\n") == (
        f"{SRC}: invalid YAML at line 2, column 5: unacceptable character U+0007 (special characters are not allowed)"
    )


def test_syntax_error_and_error_class():
    with pytest.raises(ScenarioError) as err:
        parse_yaml("a: [1, 2\n", SRC, " in the value '[1, 2'", ScenarioError)
    assert str(err.value).startswith(f"{SRC}: invalid YAML at line 2, column 1:")
    assert str(err.value).endswith(" in the value '[1, 2'")


# --- files ----------------------------------------------------------------------------------------


def test_regular_file(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_bytes(codecs.BOM_UTF8 + "a: caf\u00e9\n".encode())
    assert read_text_file(path, "a test file") == "a: caf\u00e9\n"


def read_error(path, error=InputError) -> str:
    with pytest.raises(error) as err:
        read_text_file(path, "a test file", error)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_missing_and_directory(tmp_path):
    assert read_error(tmp_path / "no.yaml") == f"{tmp_path / 'no.yaml'}: file not found, expected a test file"
    assert read_error(tmp_path) == f"{tmp_path}: is a directory, expected a test file"


def test_nul_in_path():
    assert read_error("a\x00b.yaml") == "a\x00b.yaml: cannot read the file: the path contains a NUL character"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this platform")
def test_fifo_without_a_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    out = run_isolated(f"""
        from commsim.yamlio import read_text_file
        from commsim.errors import InputError
        try:
            read_text_file({str(fifo)!r}, "a scenario YAML file")
        except InputError as err:
            print(err)
        """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{fifo}: is a named pipe (FIFO), expected a scenario YAML file (a regular file)"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this platform")
def test_a_fifo_swapped_in_after_the_check_is_opened_without_blocking(tmp_path):
    # os.stat says "regular file" (the file was replaced between stat and open): the open must
    # not block (O_NONBLOCK) and the opened FIFO must still be refused (fstat).
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    regular = tmp_path / "regular.yaml"
    regular.write_text("a: 1\n")
    out = run_isolated(f"""
        import os
        from commsim import yamlio
        from commsim.errors import InputError
        real_stat = os.stat
        yamlio.os.stat = lambda path, *a, **k: real_stat({str(regular)!r})
        try:
            yamlio.read_text_file({str(fifo)!r}, "a test file")
        except InputError as err:
            print(err)
        """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{fifo}: is a named pipe (FIFO), expected a test file (a regular file)"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_is_refused_not_read():
    out = run_isolated("""
        from commsim.yamlio import read_text_file
        from commsim.errors import InputError
        try:
            read_text_file("/dev/zero", "a test file")
        except InputError as err:
            print(err)
        """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "/dev/zero: is a character device, expected a test file (a regular file)"


def test_size_limit(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * MAX_INPUT_BYTES)
    assert len(read_text_file(path, "a test file")) == MAX_INPUT_BYTES
    path.write_bytes(b"#" * (MAX_INPUT_BYTES + 1))
    assert read_error(path) == f"{path}: is 1,048,577 bytes, more than the 1,048,576-byte limit for an input file"


def test_size_limit_holds_when_stat_understates_the_size(tmp_path, monkeypatch):
    # a file that grows after the check (or one whose st_size says 0, as in /proc) is read
    # only up to the limit
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_INPUT_BYTES + 10))
    small = tmp_path / "small.yaml"
    small.write_text("a: 1\n")
    real_stat = os.stat
    monkeypatch.setattr("commsim.yamlio.os.stat", lambda p, *a, **k: real_stat(small))
    assert read_error(path) == f"{path}: is 1,048,577 bytes, more than the 1,048,576-byte limit for an input file"


@pytest.mark.parametrize(
    "bom, name",
    [(codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"), (codecs.BOM_UTF32_LE, "UTF-32"),
     (codecs.BOM_UTF32_BE, "UTF-32")],
)
def test_utf16_and_utf32(tmp_path, bom, name):
    path = tmp_path / "wide.yaml"
    codec = {codecs.BOM_UTF16_LE: "utf-16-le", codecs.BOM_UTF16_BE: "utf-16-be",
             codecs.BOM_UTF32_LE: "utf-32-le", codecs.BOM_UTF32_BE: "utf-32-be"}[bom]
    path.write_bytes(bom + "a: 1\n".encode(codec))
    assert read_error(path) == f"{path}: cannot read the file: expected UTF-8 text, got {name} text (save it as UTF-8)"


def test_utf16_without_bom_and_binary(tmp_path):
    path = tmp_path / "wide.yaml"
    path.write_bytes("a: 1\n".encode("utf-16-le"))
    assert read_error(path) == (
        f"{path}: cannot read the file: expected UTF-8 text, got a NUL byte at offset 1 (UTF-16 text or a binary file?)"
    )
    path.write_bytes(b"a: \xff\xfe\n")
    assert read_error(path) == f"{path}: cannot read the file: expected UTF-8 text, got byte 0xff at offset 3"


def test_the_error_class_is_the_callers(tmp_path):
    read_error(tmp_path / "no.yaml", ScenarioError)
