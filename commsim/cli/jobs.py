"""Running real jobs from the CLI (``calibrate --backend``, ``validate``): torch imported only
inside a command, and a failed or interrupted job mapped to its exit code.

- A rank that dies or hangs (``validate.launch.LaunchError``): exit 3
  (:data:`commsim.errors.EXIT_RUN_FAILED`), one line.
- Ctrl-C or SIGTERM (``LaunchInterrupted``, a LaunchError, or a bare KeyboardInterrupt):
  exit 130 (:data:`commsim.errors.EXIT_INTERRUPTED`).

Either way the measurements taken so far are kept in ``OUTPUT.partial.json`` next to the
output the command was asked to write; with no measurement taken, none is written and the
message says so.
"""

from __future__ import annotations

import importlib
import json
import shlex
import sys
from contextlib import contextmanager
from typing import Iterator, NoReturn, Optional

from commsim.cli.common import fail
from commsim.cli.outputs import is_stdout, write_output
from commsim.errors import EXIT_INTERRUPTED

INSTALL_VALIDATE = "from the repository root: pip install -e '.[validate]'"


def command_line() -> str:
    """The exact command as typed (for provenance)."""
    return " ".join(shlex.quote(a) for a in ["commsim"] + sys.argv[1:])


def import_validate(name: str):
    """Import validate.<name> (and so torch) inside a command; a missing torch is one line."""
    try:
        return importlib.import_module(f"validate.{name}")
    except ImportError as exc:
        fail(f"this command needs torch ({INSTALL_VALIDATE}): {exc}")


def check_sweep_memory(backend: str, nprocs: int, max_size: int) -> None:
    """Before launching an all-reduce sweep on `nprocs` local gloo ranks: its largest tensors
    must fit in this host's memory (:func:`commsim.scenario.budget.sweep_memory_problem`),
    else one line naming --max-size, exit 2."""
    from commsim.scenario.budget import sweep_memory_problem

    problem = sweep_memory_problem(nprocs, max_size) if backend == "gloo" else None
    if problem:
        fail(f"--max-size: {problem}")


def check_backend(backend: str, nprocs: int, option: str = "--nprocs") -> None:
    """Before launching (bad input, exit 2): the `nprocs` local ranks must fit in the memory
    available, at :data:`commsim.scenario.budget.RANK_MEMORY_BYTES` each (``--nprocs 100000``, or a 1,024-rank scenario
    validated on one host, would spawn that many torch interpreters until the machine runs out
    of memory); --backend nccl needs a CUDA GPU per rank. `option` names where the count came
    from in the message."""
    from commsim.scenario.budget import local_ranks_problem

    problem = local_ranks_problem(nprocs)
    if problem:
        fail(f"{option}: {problem}")
    if backend != "nccl":
        return
    launch_mod = import_validate("launch")
    try:
        launch_mod.check_gpus(nprocs)
    except ValueError as exc:  # check_gpus's documented one-line refusal
        fail(str(exc))


def _partial_records(exc) -> dict:
    return {str(r): recs for r, recs in sorted(getattr(exc, "partial", {}).items())}


def job_failed(exc, output: Optional[str]) -> NoReturn:
    """End the command for a failed or interrupted launch (`exc`, a LaunchError): save the
    measurements taken so far as ``OUTPUT.partial.json`` and fail with exit 3 or 130."""
    code = exc.exit_code  # 3: a rank died, hung or stopped; 130: LaunchInterrupted (Ctrl-C, SIGTERM)
    records = _partial_records(exc)
    if not exc.measured or not any(records.values()):
        # the launcher's own message says "no measurements were taken"; nothing to keep
        fail(str(exc) if "no measurements" in str(exc) else f"{exc} (no measurements were taken)", code)
    if output is None or is_stdout(output):
        fail(str(exc), code)  # the launcher keeps them in its folder, which its message names
    partial_path = f"{output}.partial.json"
    write_output(partial_path, json.dumps({"error": str(exc), "partial": records}, indent=2, allow_nan=False) + "\n",
                 "the partial measurements")
    fail(f"{exc} (measurements so far saved to {partial_path})", code)


@contextmanager
def launched_job(output: Optional[str]) -> Iterator[None]:
    """Run a launched job inside ``with launched_job(OUTPUT):`` to map its failure (exit 3)
    or interruption (exit 130) and keep its partial measurements next to OUTPUT."""
    launch_mod = import_validate("launch")
    try:
        yield
    except launch_mod.LaunchError as exc:
        job_failed(exc, output)
    except KeyboardInterrupt:  # a launcher that lets Ctrl-C through: it kept no records for us
        fail("interrupted (no measurements saved)", EXIT_INTERRUPTED)
