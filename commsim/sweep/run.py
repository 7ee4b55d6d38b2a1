"""Parameter sweeps: the cartesian product of a grid of scenario overrides, one full simulation per point.

A grid maps scenario key paths (the same dotted paths as ``commsim run --set``) to lists of
values. Every point of the product is validated through the loader before anything runs, so
a bad grid fails in a second with the loader's own one-line error, not after an hour.

Points run on a local process pool (``concurrent.futures.ProcessPoolExecutor``) or on a Dask
distributed cluster (``dask.distributed.Client``); there is no home-made scheduler.

Files in the output directory:

- ``points.jsonl``: the journal. One JSON line per finished point, appended and fsync'ed as
  each point finishes, keyed by a fingerprint of the point's fully resolved scenario. This
  is what makes an interrupted sweep lose at most the points in flight, and what ``--resume``
  reads: a point whose resolved scenario is already in the journal is not run again, so a
  grid that grew is completed, not restarted, and a changed scenario file is rerun.
- ``results.csv`` and ``results.json``: one row per point of the current grid, in grid order
  (last key varying fastest), with the swept values and every metric of ``commsim run``'s
  JSON. Rewritten atomically at most once a second while the sweep runs and once at the
  end, so they are byte-identical for the same grid whatever order the points finished in.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import os
import re
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import yaml

from commsim.errors import ScenarioError
from commsim.scenario.loader import load_document, load_scenario
from commsim.atomic import atomic_write_text
from commsim.scenario.spec import Scenario

JOURNAL = "points.jsonl"
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"

# Rewrite results.csv/json at most this often while points finish: the journal is the
# durable record, and rewriting N rows per finished point would be O(N^2) on big sweeps.
_FLUSH_INTERVAL_S = 1.0

# Key syntax proper (stragglers[0].cv) is the loader's to check, through apply_overrides.
_KEY_RE = re.compile(r"^[^\s=,]+$")


class SweepError(ScenarioError):
    """A sweep that cannot start or continue (bad grid, output directory in use, no Dask).

    One line, ``SOURCE: KEY: MESSAGE`` like the loader's errors, so the CLI prints it the same way."""

    def __init__(self, source: str, path: Optional[str], message: str):
        self.source, self.path, self.message = source, path, message
        Exception.__init__(self, ": ".join(part for part in (source, path, message) if part))


class SweepInterrupted(Exception):
    """The sweep was interrupted; `done` of `total` points are saved in the output directory."""

    def __init__(self, done: int, total: int, out_dir: Path):
        super().__init__(
            f"interrupted: {done} of {total} points saved in {out_dir}; "
            "rerun with --resume to complete the sweep"
        )
        self.done, self.total, self.out_dir = done, total, out_dir


# ---------------------------------------------------------------------------------------
# Grids
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """Keys (dotted scenario paths) and, per key, the non-empty tuple of values to sweep."""

    keys: Tuple[str, ...]
    values: Tuple[Tuple[Any, ...], ...]

    def __len__(self) -> int:
        return math.prod(len(v) for v in self.values) if self.keys else 0

    def points(self) -> List[Dict[str, Any]]:
        """Every point of the cartesian product, in order (the last key varies fastest)."""
        return [dict(zip(self.keys, combo)) for combo in itertools.product(*self.values)]

    def as_dict(self) -> Dict[str, List[Any]]:
        return {k: list(v) for k, v in zip(self.keys, self.values)}


def _split_top_level(text: str) -> List[str]:
    """Split on commas that are not inside brackets, braces or quotes, so a value may be a
    YAML flow list (`stragglers=[],[{kind: jitter, cv: 0.05}]`) or a quoted string."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _check_key(key: str, where: str) -> str:
    if not _KEY_RE.match(key):
        raise SweepError(where, None, f"expected a scenario key like cluster.nodes or stragglers[0].cv, got {key!r}")
    return key


def _check_values(key: str, values: Sequence[Any], where: str) -> Tuple[Any, ...]:
    if len(values) == 0:
        raise SweepError(where, key, "expected a non-empty list of values, got an empty list")
    seen = set()
    for v in values:
        canon = _canonical(v)
        if canon in seen:
            raise SweepError(where, key, f"expected distinct values, got {_value_text(v)!r} twice")
        seen.add(canon)
    return tuple(values)


def parse_grid_option(text: str) -> Grid:
    """Parse one ``--grid KEY=V1,V2,...`` option; each value is parsed as YAML, like ``--set``."""
    where = f"--grid {text}"
    if "=" not in text:
        raise SweepError(where, None, f"expected KEY=V1,V2,... or an existing grid YAML file, got {text!r}")
    key, _, rest = text.partition("=")
    key = _check_key(key.strip(), where)
    values = []
    for token in _split_top_level(rest) if rest.strip() else []:
        if not token.strip():
            raise SweepError(where, key, "expected a value between commas, got an empty one")
        try:
            values.append(yaml.safe_load(token.strip()))
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "invalid YAML"
            raise SweepError(where, key, f"expected a YAML value, got {token.strip()!r} ({problem})") from None
    return Grid((key,), (_check_values(key, values, where),))


def _flatten_grid_doc(doc: Mapping[str, Any], prefix: str, where: str, out: Dict[str, Any]) -> None:
    for raw_key, value in doc.items():
        key = f"{prefix}{raw_key}"
        if isinstance(value, dict):
            _flatten_grid_doc(value, f"{key}.", where, out)
            continue
        _check_key(str(key), where)
        if not isinstance(value, list):
            raise SweepError(
                where, str(key), f"expected a list of values to sweep, got {_value_text(value)!r}"
            )
        out[str(key)] = _check_values(str(key), value, where)


def load_grid_file(path: os.PathLike | str) -> Grid:
    """Load a grid YAML file: a mapping from dotted keys (or nested mappings) to value lists.

    ``cluster.nodes: [4, 16, 64]`` and ``cluster: {nodes: [4, 16, 64]}`` mean the same thing;
    a list is always the list of values to sweep, so sweeping a list-valued key takes a list
    of lists (``stragglers: [[], [{kind: jitter, cv: 0.05}]]``).
    """
    where = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SweepError(where, None, f"cannot read the grid file: {exc.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SweepError(where, None, f"invalid YAML{at}: {problem}") from None
    if not isinstance(doc, dict) or not doc:
        got = "an empty document" if not doc else type(doc).__name__
        raise SweepError(where, None, f"expected a mapping of scenario keys to lists of values, got {got}")
    flat: Dict[str, Any] = {}
    _flatten_grid_doc(doc, "", where, flat)
    return Grid(tuple(flat), tuple(flat.values()))


def combine_grids(grids: Iterable[Grid]) -> Grid:
    """Join grids (from several ``--grid`` options) into one; a key given twice is an error."""
    keys: List[str] = []
    values: List[Tuple[Any, ...]] = []
    for grid in grids:
        for k, v in zip(grid.keys, grid.values):
            if k in keys:
                raise SweepError("--grid", k, "expected each key once, got it in more than one grid")
            keys.append(k)
            values.append(v)
    if not keys:
        raise SweepError("--grid", None, "expected at least one grid (KEY=V1,V2,... or a grid YAML file)")
    return Grid(tuple(keys), tuple(values))


def parse_grid_args(args: Iterable[str]) -> Grid:
    """Each ``--grid`` argument is a grid YAML file if such a file exists, else ``KEY=V1,V2,...``."""
    grids = []
    for arg in args:
        if Path(arg).is_file():
            grids.append(load_grid_file(arg))
        elif "=" in arg:
            grids.append(parse_grid_option(arg))
        else:
            raise SweepError(f"--grid {arg}", None,
                             "expected KEY=V1,V2,... or an existing grid YAML file, got neither")
    return combine_grids(grids)


# ---------------------------------------------------------------------------------------
# Points: validated, resolved scenarios
# ---------------------------------------------------------------------------------------


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _value_text(value: Any) -> str:
    """How a swept value is written in a CSV cell or a plot label."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value_text(v)}" for k, v in value.items())
    return json.dumps(value, separators=(",", ":"), default=str)


def _yaml_flow(value: Any) -> str:
    """A value as one line of YAML, so the loader's override parser reads back exactly it."""
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True)
    if text.endswith("\n...\n"):  # the document-end marker PyYAML adds after a bare scalar
        text = text[: -len("\n...\n")]
    return text.strip()


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its index in grid order, the swept values, the resolved scenario."""

    index: int
    params: Tuple[Tuple[str, Any], ...]
    overrides: Tuple[str, ...]
    scenario: Scenario
    key: str

    @property
    def label(self) -> str:
        return " ".join(f"{k}={_value_text(v)}" for k, v in self.params)


def fingerprint(scenario: Scenario) -> str:
    """A stable identity of a resolved scenario: the journal key that ``--resume`` matches on.

    The frozen spec's repr holds every field in base units, so two spellings of the same
    point ("100 Gbps" and "12.5 GB/s") are the same point, and any change is a new one."""
    return hashlib.sha256(repr(scenario).encode()).hexdigest()[:32]


def plan_sweep(
    scenario_path: os.PathLike | str,
    grid: Grid,
    overrides: Sequence[str] = (),
    steps: Optional[int] = None,
    seed: Optional[int] = None,
) -> List[Point]:
    """Resolve and validate every point of the grid through the loader, before anything runs.

    Raises the loader's ``ScenarioError`` (with the grid point appended) for the first point
    that does not validate."""
    load_document(scenario_path)  # a missing or broken file is reported once, not per point
    points = []
    for index, params in enumerate(grid.points()):
        point_overrides = tuple(f"{k}={_yaml_flow(v)}" for k, v in params.items())
        try:
            # Exactly what `commsim run --set ...` does, so the errors are the same.
            scenario = load_scenario(scenario_path, [*overrides, *point_overrides], steps, seed)
        except ScenarioError as exc:
            where = " ".join(f"{k}={_value_text(v)}" for k, v in params.items())
            exc.args = (f"{exc} (grid point {index}: {where})",)
            raise
        points.append(
            Point(index, tuple(params.items()), point_overrides, scenario, fingerprint(scenario))
        )
    return points


def run_point(scenario: Scenario) -> Dict[str, Any]:
    """Simulate one point: ``commsim run``'s summary dict. Top-level so workers can pickle it."""
    from commsim.analysis.report import summarize

    return summarize(scenario)


# ---------------------------------------------------------------------------------------
# Output files
# ---------------------------------------------------------------------------------------


def _flatten_summary(summary: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Nested metrics become dotted columns (step_time_s.mean); lists stay whole."""
    flat: Dict[str, Any] = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            flat.update(_flatten_summary(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def read_journal(out_dir: Path) -> Dict[str, Dict[str, Any]]:
    """Finished points by fingerprint. A truncated last line (a kill mid-write) is ignored."""
    done: Dict[str, Dict[str, Any]] = {}
    path = out_dir / JOURNAL
    if not path.exists():
        return done
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise SweepError(f"-o {out_dir}", JOURNAL, f"cannot read the journal: {exc.strerror or exc}") from None
    with fh:
        for line in fh:
            try:
                record = json.loads(line)
                key, summary = record["key"], record["summary"]
            except (ValueError, KeyError, TypeError):
                continue
            done.setdefault(key, summary)
    return done


class _Writer:
    """Appends finished points to the journal and renders results.csv / results.json."""

    def __init__(self, out_dir: Path, points: Sequence[Point], meta: Dict[str, Any],
                 done: Dict[str, Dict[str, Any]]):
        self.out_dir, self.points, self.meta, self.done = out_dir, points, meta, done
        try:
            self._journal = open(out_dir / JOURNAL, "a", encoding="utf-8")
        except OSError as exc:
            raise SweepError(f"-o {out_dir}", JOURNAL, f"cannot append to the journal: {exc.strerror or exc}") from None
        self._last_flush = 0.0
        self._dirty = True

    def record(self, point: Point, summary: Dict[str, Any]) -> None:
        line = json.dumps(
            {"key": point.key, "params": dict(point.params), "summary": summary},
            separators=(",", ":"), default=str,  # YAML may give dates; keep them as text
        )
        self._journal.write(line + "\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())
        self.done.setdefault(point.key, summary)
        self._dirty = True
        if time.monotonic() - self._last_flush >= _FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if not self._dirty:
            return
        write_results(self.out_dir, self.points, self.done, self.meta)
        self._last_flush = time.monotonic()
        self._dirty = False

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._journal.close()


def result_rows(points: Sequence[Point], done: Mapping[str, Dict[str, Any]]) -> Tuple[List[str], List[Dict[str, Any]]]:
    """The columns and the rows (finished points only, in grid order) of the results table."""
    grid_keys = [k for k, _ in points[0].params] if points else []
    columns = ["point", *grid_keys]
    rows = []
    for p in points:
        summary = done.get(p.key)
        if summary is None:
            continue
        flat = _flatten_summary(summary)
        for col in flat:
            # A swept key that is also a metric (e.g. `steps`) is the same number: keep one column.
            if col not in columns:
                columns.append(col)
        row = {"point": p.index, **dict(p.params)}
        row.update({k: v for k, v in flat.items() if k not in row})
        rows.append(row)
    return columns, rows


def write_results(out_dir: Path, points: Sequence[Point], done: Mapping[str, Dict[str, Any]],
                  meta: Mapping[str, Any]) -> None:
    """Render results.csv and results.json (atomically) from the finished points."""
    columns, rows = result_rows(points, done)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        cells = []
        for col in columns:
            v = row.get(col)
            if col in meta["grid"]:
                cells.append(_value_text(v))
            elif v is None:
                cells.append("")
            elif isinstance(v, (list, dict, bool)):
                cells.append(json.dumps(v, separators=(",", ":"), default=str))
            else:
                cells.append(v)
        writer.writerow(cells)
    atomic_write_text(out_dir / RESULTS_CSV, buf.getvalue())
    doc = {**meta, "points_total": len(points), "points_done": len(rows), "complete": len(rows) == len(points),
           "columns": columns, "rows": rows}
    atomic_write_text(out_dir / RESULTS_JSON, json.dumps(doc, indent=1, default=str) + "\n")


# ---------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    """What a finished sweep did: all points, how many were run now and how many reused."""

    out_dir: Path
    points: Tuple[Point, ...]
    ran: int
    reused: int
    wall_s: float


ProgressHook = Callable[[int, int], None]


def _progress_bar(total: int, already: int, enabled: bool):
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    progress = Progress(
        TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("elapsed"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        console=Console(stderr=True), disable=not enabled, transient=False,
    )
    task = progress.add_task("sweep", total=total, completed=already)
    return progress, task


def _iter_process_pool(todo: Sequence[Point], jobs: int):
    """Yield (point, summary) as points finish on a local process pool (inline for jobs=1)."""
    if jobs <= 1 or len(todo) <= 1:
        for p in todo:
            yield p, run_point(p.scenario)
        return
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)))
    try:
        pending = {pool.submit(run_point, p.scenario): p for p in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: pending[f].index):
                p = pending.pop(fut)
                yield p, fut.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _iter_dask(todo: Sequence[Point], client=None, address: Optional[str] = None):
    """Yield (point, summary) as points finish on a Dask distributed cluster."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise SweepError(
            "--dask-scheduler", None,
            "needs dask.distributed, which is not installed (pip install 'commsim[sweep]')",
        ) from None
    own_client = client is None
    if own_client:
        try:
            client = Client(address, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise SweepError(f"--dask-scheduler {address}", None, f"cannot reach the scheduler: {exc}") from None
    futures = {}
    try:
        for p in todo:
            # The fingerprint in the task key makes resubmitting the same point idempotent.
            fut = client.submit(run_point, p.scenario, key=f"commsim-point-{p.key}", pure=False)
            futures[fut] = p
        for fut in as_completed(list(futures)):
            yield futures[fut], fut.result()
    finally:
        for fut in futures:
            if not fut.done():
                fut.cancel()
        if own_client:
            client.close()


def run_sweep(
    scenario_path: os.PathLike | str,
    grid: Grid,
    out_dir: os.PathLike | str,
    *,
    overrides: Sequence[str] = (),
    steps: Optional[int] = None,
    seed: Optional[int] = None,
    jobs: Optional[int] = None,
    dask_scheduler: Optional[str] = None,
    dask_client=None,
    resume: bool = False,
    progress: bool = False,
    on_point: Optional[ProgressHook] = None,
) -> SweepResult:
    """Run every point of `grid` on `scenario_path` and write the results into `out_dir`.

    Validates the whole grid first (raising ScenarioError/SweepError before anything runs).
    `jobs` local processes (default: the CPU count; 1 runs inline), or a Dask cluster given by
    `dask_scheduler` (an address) or `dask_client` (a ``dask.distributed.Client``).
    `on_point(done, total)` is called after each finished point (tests use it to interrupt).
    Raises SweepInterrupted on Ctrl-C after saving what finished."""
    t0 = time.perf_counter()
    points = plan_sweep(scenario_path, grid, overrides, steps, seed)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise SweepError(f"-o {out}", None, "expected a directory, got a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SweepError(f"-o {out}", None, f"cannot create the output directory: {exc.strerror or exc}") from None
    journal = out / JOURNAL
    if not resume and journal.is_file() and journal.stat().st_size > 0:
        raise SweepError(
            f"-o {out}", None,
            f"already holds sweep results ({JOURNAL}); pass --resume to complete them "
            "or choose another directory",
        )
    done = read_journal(out) if resume else {}
    meta = {
        "scenario": str(scenario_path),
        "overrides": list(overrides),
        "steps": steps,
        "seed": seed,
        "grid": grid.as_dict(),
    }
    # Two grid points that resolve to the same scenario run once.
    todo, seen = [], set(done)
    for p in points:
        if p.key not in seen:
            seen.add(p.key)
            todo.append(p)
    reused = sum(1 for p in points if p.key in done)
    total = len(points)
    # Several grid points may resolve to one scenario: count them all when it finishes.
    per_key: Dict[str, int] = {}
    for p in points:
        per_key[p.key] = per_key.get(p.key, 0) + 1
    finished = sum(n for k, n in per_key.items() if k in done)
    bar, task = _progress_bar(total, finished, progress)
    writer = _Writer(out, points, meta, done)
    if dask_scheduler is not None or dask_client is not None:
        stream = _iter_dask(todo, dask_client, dask_scheduler)
    else:
        stream = _iter_process_pool(todo, jobs or os.cpu_count() or 1)
    ran = 0
    try:
        with bar:
            for p, summary in stream:
                writer.record(p, summary)
                ran += 1
                finished += per_key[p.key]
                bar.update(task, completed=finished)
                if on_point is not None:
                    on_point(finished, total)
    except KeyboardInterrupt:
        stream.close()
        writer.close()
        raise SweepInterrupted(finished, total, out) from None
    finally:
        stream.close()
        writer.close()
    return SweepResult(out, tuple(points), ran, reused, time.perf_counter() - t0)
