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
    "commsim.output.plots",
    "rich",
    "matplotlib",
) + tuple(SUBCOMMAND_MODULES) + ("commsim.cli.compare",)


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
