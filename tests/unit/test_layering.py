"""The package layering: imports run one way, down the pipeline, and form no cycle.

Every import statement of every module under commsim/ and validate/ is read from the source
(module level and inside functions alike, so a late import cannot dodge the rule), mapped to
the stage it belongs to, and checked against the order below: a module may import its own
stage and the stages listed before it, never a later one. Within a stage the module graph
must be acyclic.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Lowest first. A stage may import itself and anything before it.
LAYERS = [
    ("commsim.errors", "commsim.units", "commsim.atomic", "commsim.yamlio", "commsim.benchsizes", "commsim.parentdeath",
     "commsim.lazy", "commsim.paramtypes", "commsim.outputpaths"),
    ("commsim.network",),
    ("commsim.collectives",),
    ("commsim.calibration",),
    ("commsim.scenario",),
    ("commsim.sim",),
    ("commsim.analysis",),
    ("commsim.mitigations",),
    ("commsim.traces",),
    ("commsim.sweep",),
    ("commsim.output",),
    ("commsim.lab",),
    ("validate",),
    ("commsim.cli",),
]
TOP = ("commsim",)  # the package's public surface may import anything below the CLI


def _stage(module: str) -> int:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    if module in TOP:
        return len(LAYERS) - 1
    raise AssertionError(f"module {module} belongs to no stage: add it to LAYERS")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str):
    """(imported module, line) for every import of a commsim/validate module in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from commsim.x import y` names the module commsim.x.y when there is one, else
            # something defined in commsim.x: _graph keeps the longest name that is a module
            for alias in node.names:
                yield f"{target}.{alias.name}", node.lineno


def _graph():
    files = sorted(list((ROOT / "commsim").rglob("*.py")) + list((ROOT / "validate").rglob("*.py")))
    modules = {_module_name(p): p for p in files}
    edges = {}
    for name, path in modules.items():
        edges[name] = set()
        for target, line in _imports(path, name):
            if target.split(".")[0] not in ("commsim", "validate"):
                continue
            while target and target not in modules:  # `commsim.x.y.Name` -> the module commsim.x.y
                target = target.rpartition(".")[0]
            if target and target != name:
                edges[name].add((target, line))
    return modules, edges


def test_every_import_runs_down_the_pipeline():
    modules, edges = _graph()
    wrong = []
    for name, targets in edges.items():
        for target, line in targets:
            if name in TOP or name.startswith("commsim.cli"):
                continue  # the CLI and the public surface sit on top
            if target == "commsim":
                wrong.append(f"{modules[name].relative_to(ROOT)}:{line} imports the package root")
            elif _stage(target) > _stage(name):
                wrong.append(f"{modules[name].relative_to(ROOT)}:{line} imports {target} (a later stage)")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    modules, edges = _graph()
    graph = {n: {t for t, _ in ts} for n, ts in edges.items()}
    # a package's __init__ importing its own submodules is no cycle: the submodules never need it
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if node.startswith(nxt + "."):  # a submodule importing its parent package's __init__
                continue
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_only_validate_imports_torch_and_only_plots_import_matplotlib():
    offenders = []
    for path in sorted((ROOT / "commsim").rglob("*.py")):
        for target, line in _imports(path, _module_name(path)):
            top = target.split(".")[0]
            if top == "torch":
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports torch")
            if top == "matplotlib" and "plots" not in path.relative_to(ROOT).parts[-2:] and "plots" not in path.stem:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports matplotlib")
    assert not offenders, "\n".join(offenders)
