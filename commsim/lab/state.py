"""The lab's state file: which lab is up, with what links, under which names.

One small JSON file per lab, ``<state dir>/<name>.json``, written (atomically) *before* anything
is created, so that a run killed half-way through ``up`` still leaves a record; ``down`` reads
it, but also finds every namespace with the lab's prefix, so a lost state file loses nothing.

State dir: ``$COMMSIM_LAB_STATE_DIR`` if set, else /run/commsim-lab (root's runtime folder,
emptied at boot, as the namespaces are), else <tmp>/commsim-lab.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import List, Optional

from commsim.atomic import atomic_write_text
from commsim.lab.spec import NAME_RE, LabError, LabSpec, check_name

ENV = "COMMSIM_LAB_STATE_DIR"
FORMAT = "commsim-lab/1"


def state_dir() -> Path:
    """Where the state files live (created on demand by :func:`write_state`)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    run = Path("/run")
    if run.is_dir() and os.access(run, os.W_OK):
        return run / "commsim-lab"
    return Path(tempfile.gettempdir()) / "commsim-lab"


def state_path(name: str) -> Path:
    # the name is checked here, where it becomes a path: status, link, down and the rest take
    # --name without building a LabSpec, and `down --name ../x` removed <state dir>/../x.json
    return state_dir() / f"{check_name(name)}.json"


def write_state(spec: LabSpec, **extra) -> Path:
    """Record the lab (its spec, the namespaces it owns, who made it, plus `extra`)."""
    path = state_path(spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, **spec.to_json(), "namespaces": list(spec.namespaces()), "pid": os.getpid(), **extra}
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path


def read_state(name: str) -> Optional[dict]:
    """The lab's state document, or None when there is no state file. LabError (one line)
    when the file is there but unreadable."""
    path = state_path(name)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LabError(str(path), None, f"cannot read the lab state: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise LabError(str(path), None, f"not JSON ({exc})") from None
    except RecursionError:  # json's recursive decoder: arrays or objects nested thousands deep
        raise LabError(str(path), None, "not JSON (nested too deeply)") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LabError(str(path), "format", f"expected {FORMAT!r}, got {doc.get('format') if isinstance(doc, dict) else doc!r}")
    return doc


def read_spec(name: str) -> Optional[LabSpec]:
    doc = read_state(name)
    return None if doc is None else LabSpec.from_json(doc, str(state_path(name)))


def remove_state(name: str) -> None:
    try:
        state_path(name).unlink()
    except FileNotFoundError:
        pass


def known_labs() -> List[str]:
    """Names of the labs with a state file."""
    folder = state_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json") if NAME_RE.match(p.stem))  # no other file is a lab's
