"""Property tests over every YAML reader: whatever the bytes, a reader returns or raises an
InputError with a one-line message, never anything else, and never slowly.

Readers: the scenario loader (a file, and a ``--set`` value), the sweep's grid file and
``--grid KEY=V1,...`` option, and the calibration file. Inputs: arbitrary bytes, YAML-ish
text built from YAML's own syntax (tags, anchors, aliases, merge keys, flow and block
nesting, directives, control characters, full-width digits, huge integers), anchor/alias bombs
and deep nesting of random shape.
"""

from __future__ import annotations

import importlib
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commsim.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SLOW = 10.0  # seconds; every reader answers in milliseconds, an unguarded bomb takes minutes

SCENARIO = """\
cluster: {nodes: 1, gpus_per_node: 2, intra_node: {bandwidth: 1 GB/s}, inter_node: {bandwidth: 1 GB/s}}
model: {parameters: 1000}
compute: {forward: 1 ms, backward: 2 ms}
"""


def _grid_module():
    # the grid reader may live in commsim.sweep.grid (after the sweep split) or commsim.sweep.run
    for name in ("commsim.sweep.grid", "commsim.sweep.run"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "load_grid_file"):
            return module
    raise ImportError("no load_grid_file in commsim.sweep.grid or commsim.sweep.run")


def read_scenario(path: Path, text: str):
    from commsim.scenario.loader import load_scenario

    return load_scenario(path)


def read_set_value(path: Path, text: str):
    from commsim.scenario.loader import apply_overrides

    return apply_overrides({}, [f"x.y={text}"])


def read_grid_file(path: Path, text: str):
    return _grid_module().load_grid_file(path)


def read_grid_option(path: Path, text: str):
    return _grid_module().parse_grid_option(f"steps={text}")


def read_calibration(path: Path, text: str):
    from commsim.calibration.file import load_calibration

    return load_calibration(path)


READERS = {
    "scenario": read_scenario,
    "set-value": read_set_value,
    "grid-file": read_grid_file,
    "grid-option": read_grid_option,
    "calibration": read_calibration,
}


class _TooSlow(BaseException):
    """Raised by the alarm inside a reader that runs past SLOW (a BaseException, so that no
    reader's own ``except Exception`` swallows it)."""


def _alarm(signum, frame):
    raise _TooSlow()


def check_reader(reader, tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "input.yaml"
    path.write_bytes(data)
    text = data.decode("utf-8", errors="replace")
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, SLOW)  # a slow reader fails the example, it does not hang the run
    try:
        reader(path, text)
    except InputError as err:
        message = str(err)
        assert message and "\n" not in message and "Traceback" not in message, message
    except _TooSlow:
        raise AssertionError(f"the reader ran for more than {SLOW:g} s") from None
    except Exception as err:  # noqa: BLE001 - the property: nothing but an InputError escapes
        raise AssertionError(f"{type(err).__name__} escaped the reader: {err!s:.300}") from err
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- strategies ------------------------------------------------------------------------------------

_FRAGMENTS = [
    "[", "]", "{", "}", ", ", ": ", "- ", "? ", "\n", "\n  ", "\n    ", "  ", "\t", "#c\n", "'", '"', "|\n", ">\n",
    "&a ", "&b ", "*a", "*b", "<<: ", "!!int ", "!!float ", "!!bool ", "!!timestamp ", "!!binary ", "!!str ",
    "!!seq ", "!!map ", "!!set ", "!!omap ", "!!python/object:os.system ", "!!python/name:os.system ", "!local ",
    "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "---\n", "...\n", "~", "null", "true", "yes", ".inf", ".nan",
    "0", "1", "-3", "0x1F", "0o17", "017", "0b101", "1_000", "1:30", "1e9", "1.5e-3", "2020-13-45", "2020-01-01",
    "2020-01-01T25:00:00", "\uff12", "\u0663", "25 MB", "100 Gbps", "5 us", "abc", "9" * 4301, "0x" + "f" * 4000,
    "steps", "cluster", "nodes", "model", "parameters", "compute", "ddp", "bucket_cap", "stragglers", "kind",
    "format", "levels", "rows", "\x00", "\x07", "\ufeff", "\u2028", "\ud7ff", "\U0001f600",
]

yamlish = st.lists(st.sampled_from(_FRAGMENTS), max_size=60).map("".join)


@st.composite
def alias_bombs(draw) -> str:
    """Anchors that alias the previous level `width` times, `depth` levels deep (width**depth
    nodes once expanded, kept below about 300,000 so that a reader without a limit still ends),
    as the value of a key each reader consumes."""
    width = draw(st.integers(2, 6))
    depth = draw(st.integers(2, 12))
    while width**depth > 300_000:
        depth -= 1
    if draw(st.booleans()):  # lists of lists
        levels = ["&l0 [lol, lol]"] + [f"&l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth + 1)]
    else:  # merge keys
        levels = ["&l0 {a: lol}"] + [f"&l{i} {{<<: [{', '.join([f'*l{i - 1}'] * width)}]}}" for i in range(1, depth + 1)]
    bomb = "[" + ", ".join(levels) + "]"
    key = draw(st.sampled_from(["stragglers", "steps", "cluster.nodes", "levels", "provenance"]))
    return f"{SCENARIO}format: commsim-calibration/1\n{key}: {bomb}\n"


@st.composite
def deep_nesting(draw) -> str:
    depth = draw(st.integers(1, 3000))
    kind = draw(st.sampled_from(["flow-list", "flow-map", "block-list", "mixed"]))
    if kind == "flow-list":
        return "[" * depth + "]" * depth
    if kind == "flow-map":
        return "{a: " * depth + "1" + "}" * depth
    if kind == "block-list":
        return "".join("  " * i + "-\n" for i in range(min(depth, 400)))
    return "a: " + "[{b: " * (depth // 2) + "1" + "}]" * (depth // 2)


documents = st.one_of(
    st.binary(max_size=2000),
    yamlish.map(lambda t: t.encode("utf-8", errors="surrogatepass")),
    alias_bombs().map(str.encode),
    deep_nesting().map(str.encode),
    st.text(max_size=300).map(lambda t: (SCENARIO + t).encode("utf-8", errors="surrogatepass")),
    st.sampled_from([b"\xff\xfe" + "a: 1\n".encode("utf-16-le"), "a: 1\n".encode("utf-16-le"), b"\xef\xbb\xbfa: 1"]),
)

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", list(READERS))
@PROPERTY
@given(data=documents)
def test_a_reader_returns_or_raises_one_input_error_line(name, tmp_path, data):
    check_reader(READERS[name], tmp_path, data)


# --- the full-size bomb, in a child with a time and memory cap -------------------------------------

# 9 levels of 9 aliases: 9**9 = 387,420,489 strings once expanded, as one flow sequence.
BOMB = "[" + ", ".join(
    f"&{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]"
    for prev, name in zip([None] + list("abcdefgh"), "abcdefghi")
) + "]"
# where each reader consumes it (a reader that refuses the document for another reason first
# would pass without a limit)
BOMB_DOCUMENTS = {
    "scenario": f"{SCENARIO}stragglers: {BOMB}\n",
    "set-value": BOMB,
    "grid-file": f"stragglers: {BOMB}\n",
    "grid-option": BOMB,
    "calibration": f"format: commsim-calibration/1\nprovenance: {{sources: {BOMB}}}\n",
}

_CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
from test_yaml_readers import READERS
from pathlib import Path
from commsim.errors import InputError
path = Path({path!r})
start = time.perf_counter()
try:
    READERS[{name!r}](path, path.read_text())
except InputError as err:
    print("InputError", time.perf_counter() - start, str(err))
else:
    print("accepted", time.perf_counter() - start)
"""


def _limit_memory():  # the child may not take the machine down while it fails
    resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))


@pytest.mark.skipif(sys.platform != "linux", reason="address-space limit for the child")
@pytest.mark.parametrize("name", list(READERS))
def test_the_alias_bomb_is_refused_in_under_a_second(name, tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB_DOCUMENTS[name])
    code = textwrap.dedent(_CHILD).format(tests=str(Path(__file__).parent), path=str(path), name=name)
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30,
                             preexec_fn=_limit_memory, env=dict(os.environ, PYTHONHASHSEED="0"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the {name} reader was still expanding the bomb after 30 s")
    assert out.returncode == 0, out.stderr[-2000:]
    verdict, seconds, *message = out.stdout.split(" ", 2)
    assert verdict == "InputError", out.stdout
    assert float(seconds) < 1.0, out.stdout
    assert "aliases expand to more than" in message[0], message[0]
