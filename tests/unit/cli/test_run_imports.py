"""`commsim run` imports what the run needs and nothing else: no trace readers or blame analysis,
no calibration file reader or fitters, no remedy models, no other command's module, no rich
with -q, no matplotlib without --plot.

Start-up is guarded by the modules a fresh interpreter holds after the command, never by a
wall-clock bound (a loaded machine would make that flaky). Each probe runs in its own process
so that no other test's imports count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from commsim.cli.main import SUBCOMMAND_MODULES

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = str(ROOT / "scenarios" / "32gpu_throttle.yaml")

# Runs the CLI in-process, then prints the modules it left loaded (commsim's, rich, matplotlib).
PROBE = """
import json, sys
from commsim.cli.main import run_cli
code = run_cli(sys.argv[1:])
mods = sorted(m for m in sys.modules if m.split(".")[0] in ("commsim", "rich", "matplotlib"))
print(json.dumps({"code": code, "modules": mods}))
"""

# Not needed by a run without --trace/--plot/--calibration and without a mitigation section.
HEAVY = (
    "commsim.traces",  # the package and every submodule: readers, matching, blame, perfetto
    "commsim.analysis.blame",
    "commsim.calibration.file",
    "commsim.calibration.fit",
    "commsim.calibration.physical_file",
    "commsim.calibration.physical_fit",
    "commsim.calibration.nccl_tables",
    "commsim.calibration.nccl_log",
    "commsim.calibration.from_logs",
    "commsim.mitigations.compare",
    "commsim.mitigations.spec",  # the remedies' parser: a run only checks the section is absent
    "commsim.output.plots",
    "rich",
    "matplotlib",
) + tuple(SUBCOMMAND_MODULES) + ("commsim.cli.compare",)


# A ring run plans rings only: not the other algorithms, auto's candidates or NCCL's models and
# tuner (the registry loads an algorithm's module on first use).
NOT_FOR_A_RING = (
    "commsim.collectives.auto",
    "commsim.collectives.halving_doubling",
    "commsim.collectives.hierarchical",
    "commsim.collectives.nccl",  # the package and every submodule: NCCL's estimate and physical model
    "commsim.collectives.nccl_constants",
    "commsim.collectives.nccl_model",
    "commsim.collectives.nccl_tuner",
    "commsim.collectives.reduce_broadcast",
    "commsim.collectives.reference",
    "commsim.collectives.tree",
)


def _probe(code: str, *args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # this checkout's commsim, whatever is installed
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _under(modules, prefixes):
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_plain_run_imports_none_of_the_heavy_modules():
    got = _probe(PROBE, "run", SCENARIO, "-q")
    assert got["code"] == 0
    assert "commsim.sim.engine" in got["modules"]  # the probe sees the run's imports
    assert _under(got["modules"], HEAVY) == []


def test_a_ring_run_imports_the_ring_and_no_other_algorithm():
    got = _probe(PROBE, "run", SCENARIO, "-q")
    assert got["code"] == 0
    assert {"commsim.collectives.ring", "commsim.collectives.ring_closed_form"} <= set(got["modules"])
    assert _under(got["modules"], NOT_FOR_A_RING) == []


def test_a_tree_run_imports_the_tree_and_not_the_others():
    got = _probe(PROBE, "run", SCENARIO, "-q", "--steps", "2", "--set", "collective.algorithm=tree")
    assert got["code"] == 0
    assert _under(got["modules"], NOT_FOR_A_RING) == ["commsim.collectives.tree"]


# Counts the YAML parses of a run (the file, and each --set value) in-process.
PARSES = """
import json, sys
import commsim.yamlio, commsim.scenario.loader as loader
texts = []
original = loader.parse_yaml
def counting(text, *args, **kwargs):
    texts.append(text)
    return original(text, *args, **kwargs)
loader.parse_yaml = counting
from commsim.cli.main import run_cli
code = run_cli(sys.argv[1:])
print(json.dumps({"code": code, "parses": len(texts)}))
"""


def test_run_parses_the_scenario_file_once():
    # the loader's document also answers whether a `mitigation:` section is there
    assert _probe(PARSES, "run", SCENARIO, "-q", "--steps", "2") == {"code": 0, "parses": 1}
    # one more for the --set value (parsed as YAML), none for a second read of the file
    assert _probe(PARSES, "run", SCENARIO, "-q", "--steps", "2", "--set", "seed=4") == {"code": 0, "parses": 2}


def test_run_still_refuses_a_mitigation_section_set_on_the_command_line():
    code = """
import sys
from commsim.cli.main import main
main.main(args=sys.argv[1:], prog_name="commsim")
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, "run", SCENARIO, "-q", "--steps", "2", "--set",
                          "mitigation=[fp16]"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "mitigation" in out.stderr and "commsim compare" in out.stderr


def test_run_with_json_and_csv_still_imports_none_of_them(tmp_path):
    got = _probe(PROBE, "run", SCENARIO, "-q", "--json", tmp_path / "s.json", "--csv", tmp_path / "s.csv")
    assert got["code"] == 0 and (tmp_path / "s.json").exists() and (tmp_path / "s.csv").exists()
    assert _under(got["modules"], HEAVY) == []


def test_run_with_trace_imports_the_trace_writer_only(tmp_path):
    got = _probe(PROBE, "run", SCENARIO, "-q", "--steps", "2", "--trace", tmp_path / "t.json")
    assert got["code"] == 0 and (tmp_path / "t.json").exists()
    # the package (a submodule's parent) and its writer; not the readers, matching or blame
    assert _under(got["modules"], ("commsim.traces",)) == ["commsim.traces", "commsim.traces.perfetto"]


LAZY = """
import json, sys
import commsim.calibration as calib, commsim.traces as traces
before = sorted(m for m in sys.modules if m.startswith(("commsim.calibration.", "commsim.traces.")))
from commsim.calibration.file import load_calibration
from commsim.traces.importer import import_traces
same = calib.load_calibration is load_calibration and traces.import_traces is import_traces
try:
    calib.no_such_name
    missing = "no error"
except AttributeError as exc:
    missing = str(exc)
public = {n: sorted(set(m.__all__) - set(dir(m))) for n, m in (("calibration", calib), ("traces", traces))}
star = {}
exec("from commsim.calibration import *", star)
print(json.dumps({"before": before, "same": same, "missing": missing, "public": public,
                  "star": sorted(set(calib.__all__) - set(star))}))
"""


def test_package_names_load_on_first_use_and_are_the_submodules_own():
    got = _probe(LAZY)
    assert got["before"] == []  # importing the packages loads none of their submodules
    assert got["same"] is True
    assert "no_such_name" in got["missing"]
    assert got["public"] == {"calibration": [], "traces": []}
    assert got["star"] == []


def test_lazy_tables_match_the_imports_written_for_readers():
    """The name -> submodule tables of the lazy packages say what their TYPE_CHECKING imports say."""
    import ast

    import commsim.calibration
    import commsim.traces

    for package in (commsim.calibration, commsim.traces):
        tree = ast.parse(Path(package.__file__).read_text())
        written = {alias.asname or alias.name: node.module.rpartition(".")[2]
                   for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and (node.module or "").startswith(package.__name__ + ".") for alias in node.names}
        assert written == package._EXPORTS, package.__name__
