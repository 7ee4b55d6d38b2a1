"""A calibration from nccl-tests logs: parse each log, check that they come from one system,
group their rows by link level, fit each level."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace as _replace
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import numpy as np

from commsim.calibration.errors import CalibrationError
from commsim.calibration.file import utc_now_iso
from commsim.calibration.fit import fit_link
from commsim.calibration.nccl_log import NcclLog, check_allreduce, load_nccl_log
from commsim.calibration.records import LEVELS, Calibration, Measurement, Provenance, SourceFile
from commsim.calibration.nccl_tables import load_tables
from commsim.calibration.physical_fit import Measurement as PhysMeasurement, fit_physical
from commsim.errors import InputError

if TYPE_CHECKING:
    from commsim.network.system import System


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def auto_level(hostnames: Sequence[str], nodes: Optional[int] = None) -> str:
    """One host: intra_node; several: inter_node (the ring crosses nodes); without host names,
    the node count of the file's own header if it states one; else flat."""
    if hostnames:
        return "intra_node" if len(hostnames) == 1 else "inter_node"
    if nodes:
        return "intra_node" if nodes == 1 else "inter_node"
    return "flat"


@dataclass(frozen=True)
class SystemLayout:
    """What a log says about the system it ran on; None where the log does not say.

    - gpus: the distinct GPU model names of its device list (``#  Rank  0 ... on HOST device 0
      [BUS] NVIDIA A100-SXM4-80GB``);
    - nodes: the distinct hosts of the device list, else the node count of the file's own
      ``# NRANKS: N (K nodes ...)`` header (NCCL INFO lines are not counted: a log often
      holds only some ranks' INFO lines);
    - ranks_per_node: world size / nodes when that divides.
    """

    gpus: Optional[Tuple[str, ...]]
    nodes: Optional[int]
    ranks_per_node: Optional[int]

    def describe(self) -> str:
        parts = []
        if self.gpus:
            parts.append(" + ".join(self.gpus))
        if self.nodes:
            parts.append(f"{self.nodes} node{'s' if self.nodes > 1 else ''}"
                         + (f" x {self.ranks_per_node} ranks" if self.ranks_per_node else ""))
        return ", ".join(parts) or "no device list or node count"


def system_layout(log: NcclLog) -> SystemLayout:
    """The :class:`SystemLayout` of a parsed log."""
    gpus = tuple(sorted({d.name for d in log.devices if d.name})) or None
    hosts = {d.host for d in log.devices}
    nodes = len(hosts) if hosts else log.nodes
    per_node = log.world_size // nodes if nodes and log.world_size % nodes == 0 else None
    return SystemLayout(gpus, nodes, per_node)


def layout_difference(a: SystemLayout, b: SystemLayout) -> Optional[str]:
    """How two layouts differ, where both say ("GPUs X vs Y", "8 vs 2 ranks per node"); None
    when nothing that both state differs. The node count alone is no difference: one system
    is calibrated from a one-node log (intra_node) and a multi-node log (inter_node)."""
    diffs = []
    if a.gpus and b.gpus and a.gpus != b.gpus:
        diffs.append(f"GPU {' + '.join(a.gpus)} vs {' + '.join(b.gpus)}")
    if a.ranks_per_node and b.ranks_per_node and a.ranks_per_node != b.ranks_per_node:
        diffs.append(f"{a.ranks_per_node} vs {b.ranks_per_node} ranks per node")
    return ", ".join(diffs) or None


def check_same_system(logs: Sequence[Tuple[str, NcclLog]]) -> None:
    """CalibrationError naming the first two logs (path, parsed log) whose device lists or
    layouts differ: one calibration describes one system, and a fit over two systems' rows
    describes neither (six published logs from four GPU models fitted to 2,590% error)."""
    layouts = [(path, system_layout(log)) for path, log in logs]
    for i, (path_b, b) in enumerate(layouts):
        for path_a, a in layouts[:i]:
            diff = layout_difference(a, b)
            if diff:
                raise CalibrationError(
                    f"{path_a} and {path_b} come from different systems ({diff}); a calibration describes one "
                    "system: fit them separately, or pass --same-system if they are one"
                )


def calibration_from_nccl_logs(
    paths: Sequence[str], level: str = "auto", ranks: Optional[int] = None,
    in_place: bool = False, command: Optional[str] = None, same_system: bool = False,
) -> Tuple[Calibration, list]:
    """Parse every log, check they come from one system (unless `same_system`: see
    :func:`check_same_system`), group their measurements by link level, fit each level.

    Returns the calibration and the parsed logs as (path, log, level) (for reporting). A
    level whose sizes cannot determine the bandwidth is a CalibrationError naming its logs."""
    if not paths:
        raise CalibrationError("no nccl-tests log given")
    by_level: dict = {}
    logs: List[Tuple[str, NcclLog, str]] = []
    for path in paths:
        log = load_nccl_log(path, world_size=ranks)
        check_allreduce(log)
        lv = auto_level(log.hostnames, log.nodes) if level == "auto" else level
        by_level.setdefault(lv, []).extend(
            Measurement(size, t, log.world_size) for size, t in log.times(in_place=in_place)
        )
        logs.append((path, log, lv))
    if not same_system:
        check_same_system([(str(p), log) for p, log, _ in logs])
    if "flat" in by_level and len(by_level) > 1:
        raise CalibrationError(
            "some logs have no host information (level 'flat') and others do: pass --level for a consistent split"
        )
    levels = []
    for lv, ms in sorted(by_level.items(), key=lambda kv: LEVELS.index(kv[0]) if kv[0] in LEVELS else len(LEVELS)):
        try:
            levels.append(fit_link(lv, ms))
        except CalibrationError as err:
            raise CalibrationError(err.message, ", ".join(str(p) for p, _, l in logs if l == lv)) from None
    versions = sorted({log.nccl_version for _, log, _ in logs if log.nccl_version})
    prov = Provenance(
        backend="nccl-tests",
        world_size=max(log.world_size for _, log, _ in logs),
        hostnames=tuple(sorted({h for _, log, _ in logs for h in log.hostnames})),
        nccl_version=",".join(versions) or None,
        date=utc_now_iso(),
        command=command,
        sources=tuple(SourceFile(str(p), _sha256(p), log.command) for p, log, _ in logs),
    )
    return Calibration(tuple(levels), prov), logs


# NCCL's tuning row of a GPU (src/graph/tuning.cc: compute capability >= 10.0 Blackwell, >= 9.0
# Hopper, >= 8.0 Ampere, else Volta), from the model name the device list prints ("NVIDIA
# A100-SXM4-40GB", "Tesla V100-SXM2-16GB"). Ada (8.9) is NCCL's Ampere row, Turing (7.5) and
# Pascal its Volta row. First match wins; a name none matches ("NVIDIA Graphics Device", what
# a driver older than the GPU prints) is not judged.
_GPU_ARCH_PATTERNS = (
    ("blackwell", r"\bG?B[123]00\b|Blackwell|RTX 50[5-9]0"),
    ("hopper", r"\bG?H(100|200|800|20)\b"),
    ("ampere", r"\bA(100|800|10G?|16|2|30|40)\b|RTX A\d{4}|RTX 30[5-9]0|\bL(4|20|40S?)\b|RTX 40[6-9]0|Ada"),
    ("volta", r"\bV100\b|\bT4\b|\bP(4|40|100)\b|RTX 20[6-8]0|TITAN|Quadro|GTX"),
)


def gpu_arch_of(gpu_name: Optional[str]) -> Optional[str]:
    """NCCL's tuning row (a :data:`commsim.network.system.ARCHS` name) of a device-list GPU
    model name; None for a name it does not know."""
    for arch, pattern in _GPU_ARCH_PATTERNS:
        if gpu_name and re.search(pattern, gpu_name):
            return arch
    return None


def check_log_gpu(path: str, gpu_name: Optional[str], system: "System") -> None:
    """CalibrationError at ``--system`` when the log's GPU is of another generation than the
    system's: a fit starts from the system's nominal constants and NCCL's per-generation
    priors, so an A100 log fitted as H100 hardware gives H100 constants that describe neither."""
    arch = gpu_arch_of(gpu_name)
    if arch is not None and arch != system.gpu_arch:
        from commsim.network.system import PRESETS

        same = sorted(name for name, s in PRESETS.items() if s.gpu_arch == arch)
        raise CalibrationError(
            f"expected a system of the log's GPU ({gpu_name}: {arch}), got {system.name} ({system.gpu_arch}); "
            f"presets of {arch} GPUs: {', '.join(same)}", path, "--system")


def _log_says(path: str, lt, nodes: Optional[int], gpus_per_node: Optional[int], ranks: Optional[int]) -> None:
    """CalibrationError naming the flag when --nodes, --gpus-per-node or --ranks contradicts the
    log's device list (its hosts and ranks): the flags are for logs that do not say, and a
    flag the log contradicts was silently ignored (or forced a wrong world size)."""
    per_node = lt.world_size // lt.nodes
    says = f"the log's device list has {lt.nodes} node{'s' if lt.nodes > 1 else ''} x {per_node} ranks"
    for flag, given, logged in (("--nodes", nodes, lt.nodes), ("--gpus-per-node", gpus_per_node, per_node),
                                ("--ranks", ranks, lt.world_size)):
        if given is not None and given != logged:
            raise CalibrationError(f"{says} ({lt.world_size} ranks), {flag} says {given}: drop {flag} "
                                   "(it is for logs that do not say)", path, flag)


@dataclass(frozen=True)
class PhysicalLogs:
    """What :func:`physical_fit_from_nccl_logs` read: per log its path, scale and tables."""

    path: str
    nodes: int
    gpus_per_node: int
    kinds: Tuple[str, ...]
    rows: int
    scale_from: str


def _load_physical(path: str, world: Optional[int], nodes, gpus_per_node, ranks):
    """The log's tables; what its device list says wins, and a flag that contradicts it is
    refused (:func:`_log_says`); a log without one is read with the world size of the flags."""
    try:
        lt = load_tables(path)
    except CalibrationError:  # e.g. no world size of its own: the flags give it
        if world is None:
            raise
        return load_tables(path, world_size=world)
    if lt.nodes and lt.world_size % lt.nodes == 0:
        _log_says(path, lt, nodes, gpus_per_node, ranks)
        return lt
    return lt if world is None else load_tables(path, world_size=world)


def physical_fit_from_nccl_logs(
    paths: Sequence[str], system: "System", *, nodes: Optional[int] = None, gpus_per_node: Optional[int] = None,
    ranks: Optional[int] = None, same_system: bool = False,
):
    """Fit `system`'s physical constants jointly to every all_reduce / all_gather /
    reduce_scatter table of the logs (:func:`commsim.calibration.physical_fit.fit_physical`).

    A log's scale is its device list's hosts and ranks; `nodes` / `gpus_per_node` give it for
    logs that do not say (a CalibrationError names the log otherwise). The NCCL version the
    logs print replaces the system's (it decides NCCL's algorithm and protocol choice).
    Returns (fit, [PhysicalLogs])."""
    if not paths:
        raise CalibrationError("no nccl-tests log given")
    measurements, read, versions = [], [], []
    world = ranks or (nodes * gpus_per_node if nodes and gpus_per_node else None)
    for path in paths:
        lt = _load_physical(str(path), world, nodes, gpus_per_node, ranks)
        check_log_gpu(str(path), lt.gpu_name, system)
        n_nodes, gpn, origin = lt.nodes, None, "device list"
        if n_nodes and lt.world_size % n_nodes == 0:
            gpn = lt.world_size // n_nodes
        if not (n_nodes and gpn):
            if nodes and gpus_per_node:
                n_nodes, gpn, origin = nodes, gpus_per_node, "--nodes/--gpus-per-node"
            elif nodes and lt.world_size % nodes == 0:
                n_nodes, gpn, origin = nodes, lt.world_size // nodes, "--nodes"
            elif gpus_per_node and lt.world_size % gpus_per_node == 0:
                n_nodes, gpn, origin = lt.world_size // gpus_per_node, gpus_per_node, "--gpus-per-node"
            else:
                raise CalibrationError(f"the log does not say its node count ({lt.world_size} ranks): "
                                       "pass --nodes and --gpus-per-node", str(path))
        if n_nodes * gpn != lt.world_size:
            raise CalibrationError(f"{n_nodes} nodes x {gpn} GPUs is not the log's {lt.world_size} ranks", str(path))
        try:
            system.check_scale(n_nodes, gpn, str(path))
        except CalibrationError:
            raise
        except InputError as exc:
            raise CalibrationError(f"{exc.message} (system {system.name})", str(path), exc.path) from None
        if lt.nccl_version:
            versions.append(lt.nccl_version)
        for t in lt.tables:
            measurements.append(PhysMeasurement(
                str(path), t.kind, n_nodes, gpn, np.array([r[0] for r in t.rows], dtype=float),
                np.array([r[1] for r in t.rows], dtype=float), lt.gpu_name or ""))
        read.append(PhysicalLogs(str(path), n_nodes, gpn, tuple(t.kind for t in lt.tables),
                                 sum(len(t.rows) for t in lt.tables), origin))
    if versions:
        major_minor = sorted({".".join(v.split(".")[:2]) for v in versions})
        if len(major_minor) > 1 and not same_system:
            raise CalibrationError(f"logs of different NCCL versions ({', '.join(major_minor)}): NCCL's algorithm "
                                   "choice differs between them; fit them separately, or pass --same-system", str(paths[0]))
        system = _replace(system, nccl_version=major_minor[0])
    try:
        fit = fit_physical(measurements, system, declared_same=same_system)
    except CalibrationError:
        raise
    except InputError as exc:
        raise CalibrationError(exc.message + ("; pass --same-system if they are one" if "different systems" in exc.message else ""),
                               exc.source, exc.path) from None
    return fit, read


def physical_provenance(read: Sequence[PhysicalLogs], command: Optional[str]) -> Provenance:
    """Provenance of a physical fit alone (no per-level table fit)."""
    return Provenance(
        backend="nccl-tests",
        world_size=max(p.nodes * p.gpus_per_node for p in read),
        date=utc_now_iso(),
        command=command,
        sources=tuple(SourceFile(p.path, _sha256(p.path), None) for p in read),
    )
