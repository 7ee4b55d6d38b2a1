"""A corpus of bad inputs for every YAML reader, and a runner that counts how the CLI takes them.

Each case is one command line of ``commsim`` with the files it names. A case is *clean* when the
command exits 2 with exactly one line on stderr, a *traceback* when stderr holds one, a *hang*
when it runs past the timeout (the process group is killed), and *other* otherwise (accepted,
another exit code, several lines). Each command runs under a 4 GiB address-space cap, so a
reader that expands a bomb or reads /dev/zero ends in a MemoryError (a traceback) instead of
taking the machine's memory. ``test_bad_inputs.py`` runs the loader's share in-process;
this script runs them all through the CLI::

    python tests/property/bad_inputs.py [--root CHECKOUT] [--timeout 20] [--only scenario,set]
"""

from __future__ import annotations

import argparse
import codecs
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

SCENARIO = """\
name: corpus
steps: 5
cluster:
  nodes: 1
  gpus_per_node: 8
  intra_node: {bandwidth: 300 GB/s, latency: 3 us}
  inter_node: {bandwidth: 100 Gbps, latency: 10 us}
model: {parameters: 1e8, grad_dtype: fp32}
compute: {forward: 10 ms, backward: 20 ms}
"""

BOMB_LIST = "[" + ", ".join(
    f"&{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]"
    for prev, name in zip([None] + list("abcdefgh"), "abcdefghi")
) + "]"
BOMB_FILE = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip([None] + list("abcdefgh"), "abcdefghi")
)

GOOD_CALIBRATION = """\
format: commsim-calibration/1
levels:
  intra_node: {alpha_s: 1.0e-05, beta_Bps: 1.0e+10}
"""

MEMORY_CAP = 4 * 1024**3  # address space of each command: a runaway fails fast instead of swapping

# A file's content: bytes, text, or a special kind the runner creates ("fifo", "devzero", "dir").
Content = Union[bytes, str]


@dataclass
class Case:
    name: str
    reader: str  # scenario, set, flag, grid, grid-option, calibration
    argv: List[str]  # {scenario}, {file}, {out} are filled in
    file: Optional[Content] = None
    files: Dict[str, Content] = field(default_factory=dict)


def _scenario_case(name: str, content: Content) -> Case:
    return Case(name, "scenario", ["run", "{file}", "-q"], content)


def _set_case(name: str, override: str) -> Case:
    return Case(name, "set", ["run", "{scenario}", "-q", "--set", override])


def _grid_case(name: str, content: Content) -> Case:
    return Case(name, "grid", ["sweep", "{scenario}", "--grid", "{file}", "-o", "{out}", "-j", "1", "-q"], content)


def _grid_option_case(name: str, option: str) -> Case:
    return Case(name, "grid-option", ["sweep", "{scenario}", "--grid", option, "-o", "{out}", "-j", "1", "-q"])


def _calibration_case(name: str, content: Content) -> Case:
    return Case(name, "calibration", ["run", "{scenario}", "-q", "--calibration", "{file}"], content)


def _bad_yaml_texts() -> List[Tuple[str, str]]:
    """(name, text) of YAML that every reader must refuse in one line, placed where it is read."""
    return [
        ("alias bomb", BOMB_FILE),
        ("recursive alias", "a: &a [*a]\n"),
        ("deep flow nesting 50,000", "[" * 50_000),
        ("deep mapping nesting 50,000", "{a: " * 50_000),
        ("!!int abc", "steps: !!int abc\n"),
        ("!!float x", "x: !!float x\n"),
        ("!!timestamp 2020-13-45", "x: !!timestamp 2020-13-45\n"),
        ("implicit bad date", "x: 2020-13-45\n"),
        ("!!bool maybe", "x: !!bool maybe\n"),
        ("!!binary bad", "x: !!binary 'abc'\n"),
        ("!!python/object", "x: !!python/object/apply:os.system [echo hi]\n"),
        ("5,000-digit integer", "x: " + "1" * 5000 + "\n"),
        ("hex integer of 5,000 digits", "x: 0x" + "f" * 5000 + "\n"),
        ("duplicate keys", "a: 1\na: 2\n"),
        ("control character", "a: \x07\n"),
    ]


def cases() -> List[Case]:
    out: List[Case] = []
    # --- scenario files
    for name, text in _bad_yaml_texts():
        out.append(_scenario_case(f"scenario: {name}", text))
    out += [
        _scenario_case("scenario: alias bomb inside stragglers", f"{SCENARIO}stragglers: {BOMB_LIST}\n"),
        _scenario_case("scenario: deep block nesting", "".join(" " * i + "a:\n" for i in range(500))),
        _scenario_case("scenario: full-width digit nodes: ２", SCENARIO.replace("nodes: 1", "nodes: \uff12")),
        _scenario_case("scenario: !!int ２", SCENARIO.replace("nodes: 1", "nodes: !!int \uff12")),
        _scenario_case("scenario: UTF-16 with BOM", codecs.BOM_UTF16_LE + SCENARIO.encode("utf-16-le")),
        _scenario_case("scenario: UTF-16 without BOM", SCENARIO.encode("utf-16-le")),
        _scenario_case("scenario: latin-1", "name: caf\u00e9\n".encode("latin-1")),
        _scenario_case("scenario: NUL byte", b"name: a\x00b\n"),
        _scenario_case("scenario: random binary", bytes(range(256)) * 4),
        _scenario_case("scenario: 2 MiB file", "#" * (2 * 1024 * 1024)),
        _scenario_case("scenario: FIFO without a writer", "fifo"),
        _scenario_case("scenario: /dev/zero", "devzero"),
        _scenario_case("scenario: a directory", "dir"),
        _scenario_case("scenario: empty file", ""),
        _scenario_case("scenario: tab indentation", "a:\n\tb: 1\n"),
        _scenario_case("scenario: exponent beyond Decimal", SCENARIO.replace("steps: 5", "steps: 1e99999999999999999999")),
        _scenario_case("scenario: steps 100,000,000", SCENARIO.replace("steps: 5", "steps: 100000000")),
        _scenario_case("scenario: 2,000,000 steps at 512 ranks",
                       SCENARIO.replace("steps: 5", "steps: 2000000").replace("nodes: 1", "nodes: 64")),
        # at the default 100 steps, as reported (5 steps at a million ranks fit in 1.6 GB and seconds)
        _scenario_case("scenario: 1,000,000 ranks",
                       SCENARIO.replace("nodes: 1", "nodes: 125000").replace("steps: 5", "steps: 100")),
        _scenario_case("scenario: bucket_cap 400 B", SCENARIO.replace("steps: 5", "steps: 100") + "ddp: {bucket_cap: 400 B}\n"),
    ]
    # --- --set values and flags
    out += [
        _set_case("--set: 5,000-digit list index", "stragglers[" + "9" * 5000 + "].cv=1"),
        _set_case("--set: full-width list index", "stragglers[\uff10].cv=1"),
        _set_case("--set: full-width value", "cluster.nodes=\uff12"),
        _set_case("--set: !!int abc", "steps=!!int abc"),
        _set_case("--set: !!timestamp 2020-13-45", "steps=!!timestamp 2020-13-45"),
        _set_case("--set: !!float x", "steps=!!float x"),
        _set_case("--set: 5,000-digit integer", "steps=" + "1" * 5000),
        _set_case("--set: alias bomb", "stragglers=" + BOMB_LIST),
        _set_case("--set: deep nesting", "stragglers=" + "[" * 5000),
        Case("--set: 1,000,000 ranks", "set", ["run", "{scenario}", "-q", "--set", "steps=100", "--set", "cluster.nodes=125000"]),
        Case("--steps 100,000,000", "flag", ["run", "{scenario}", "-q", "--steps", "100000000"]),
    ]
    # --- grid files and options
    for name, text in _bad_yaml_texts():
        out.append(_grid_case(f"grid: {name}", text))
    out += [
        _grid_case("grid: alias bomb as values", f"stragglers: {BOMB_LIST}\n"),
        _grid_case("grid: UTF-16", codecs.BOM_UTF16_LE + "steps: [1, 2]\n".encode("utf-16-le")),
        _grid_case("grid: latin-1", "name: [caf\u00e9]\n".encode("latin-1")),
        _grid_case("grid: FIFO", "fifo"),
        _grid_option_case("--grid: !!int abc", "steps=!!int abc,2"),
        _grid_option_case("--grid: !!timestamp", "steps=!!timestamp 2020-13-45"),
        _grid_option_case("--grid: 5,000-digit integer", "steps=" + "1" * 5000),
        _grid_option_case("--grid: alias bomb", "stragglers=" + BOMB_LIST),
    ]
    # --- calibration files
    for name, text in _bad_yaml_texts():
        out.append(_calibration_case(f"calibration: {name}", text))
    out += [
        _calibration_case("calibration: alias bomb in provenance",
                          f"format: commsim-calibration/1\nprovenance: {{sources: {BOMB_LIST}}}\n"),
        _calibration_case("calibration: 400-digit integer", GOOD_CALIBRATION.replace("1.0e+10", "1" * 400)),
        _calibration_case("calibration: duplicate key in levels",
                          GOOD_CALIBRATION + "  intra_node: {alpha_s: 1.0e-05, beta_Bps: 1.0e+10}\n"),
        _calibration_case("calibration: UTF-16", codecs.BOM_UTF16_LE + GOOD_CALIBRATION.encode("utf-16-le")),
        _calibration_case("calibration: FIFO", "fifo"),
        _calibration_case("calibration: /dev/zero", "devzero"),
    ]
    return out


def _materialize(case: Case, work: Path) -> List[str]:
    scenario = work / "scenario.yaml"
    scenario.write_text(SCENARIO)
    target = work / "input.yaml"
    if case.file == "fifo":
        os.mkfifo(target)
    elif case.file == "devzero":
        target = Path("/dev/zero")
    elif case.file == "dir":
        target.mkdir()
    elif isinstance(case.file, bytes):
        target.write_bytes(case.file)
    elif case.file is not None:
        target.write_text(case.file, encoding="utf-8")
    names = {"{scenario}": str(scenario), "{file}": str(target), "{out}": str(work / "out")}
    return [names.get(arg, arg) for arg in case.argv]


def _cap_memory() -> None:
    # A reader that expands a bomb or reads /dev/zero must fail here, not take the machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run_case(case: Case, root: Path, timeout: float) -> Tuple[str, str]:
    """(verdict, first stderr line) of one case through ``python -m commsim.cli``."""
    with tempfile.TemporaryDirectory(prefix="commsim-corpus-") as tmp:
        argv = _materialize(case, Path(tmp))
        env = dict(os.environ, PYTHONPATH=str(root))
        proc = subprocess.Popen([sys.executable, "-m", "commsim.cli", *argv], cwd=tmp, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=_cap_memory)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return "hang", f"still running after {timeout:g} s"
    lines = [line for line in err.splitlines() if line.strip()]
    first = lines[-1] if lines else ""
    if "Traceback (most recent call last)" in err:
        return "traceback", first[:160]
    if proc.returncode == 2 and len(lines) == 1:
        return "clean", first[:160]
    return "other", f"exit {proc.returncode}, {len(lines)} stderr line(s): {first[:120]}"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2]), help="checkout to run")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--only", default="", help="comma-separated readers (scenario, set, flag, grid, grid-option, calibration)")
    args = parser.parse_args(argv)
    only = {r for r in args.only.split(",") if r}
    counts: Dict[str, Dict[str, int]] = {}
    for case in cases():
        if only and case.reader not in only:
            continue
        verdict, line = run_case(case, Path(args.root), args.timeout)
        counts.setdefault(case.reader, {}).setdefault(verdict, 0)
        counts[case.reader][verdict] += 1
        print(f"{verdict:9s} {case.name:45s} {line}", flush=True)
    print()
    total: Dict[str, int] = {}
    for reader, by in counts.items():
        tried = sum(by.values())
        print(f"{reader:12s} tried {tried:3d}: " + ", ".join(f"{k} {v}" for k, v in sorted(by.items())))
        for k, v in by.items():
            total[k] = total.get(k, 0) + v
    print(f"{'all':12s} tried {sum(total.values()):3d}: " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
