"""The remedies a user can ask for, as frozen records, and the one parser of their syntax.

Syntax (``commsim compare --mitigations``): remedies separated by commas, each compared on its
own; ``A+B`` combines two remedies in one run; parameters follow the name after colons::

    fp16,bf16,powersgd:r=4:start=10,backup:b=2,localsgd:H=8,async:servers=4,buckets,fp16+powersgd:r=1

The same remedies can be written in a scenario file under ``mitigation:``, a list of mappings
(``- {remedy: powersgd, r: 4}``; ``remedy: fp16+powersgd`` combines) read by
:func:`parse_section`. Every problem is a :class:`MitigationError` naming the source and the
key path (``powersgd.r``, or ``mitigation[1].r`` in a file): what was expected, what was given.

Which remedies combine (:data:`COMBINABLE`): fp16 or bf16 with powersgd, as torch's
``fp16_compress_wrapper`` / ``bf16_compress_wrapper`` around ``powerSGD_hook`` do. Nothing else:
DDP takes one communication hook (fp16, bf16, powersgd and post-local SGD are each one), backup
workers and asynchronous SGD replace the all-reduce altogether, and bucket tuning searches the
plain DDP run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from commsim.errors import InputError
from commsim.scenario.schema_fields import read_rate, read_time_or_zero
from commsim.units import MIN_FRACTION, describe, parse_count, parse_number

# Defaults, each with its source:
# - DEFAULT_MEMORY_BANDWIDTH: the rate casts and PowerSGD's memory passes run at when the remedy
#   gives none: 1.5 TB/s, an A100-40GB's HBM2 (1,555 GB/s, NVIDIA A100 datasheet); V100 is 900 GB/s,
#   H100 SXM 3.35 TB/s: give `mem_bw` for those.
# - DEFAULT_FLOPS: fp32 matmul rate of PowerSGD's projections: 19.5 TFLOP/s (A100 FP32, datasheet).
# - POWERSGD_START: torch's PowerSGDState(start_powerSGD_iter=1_000) default.
# - DEFAULT_WIDTH: gradients modeled as width x width matrices (see commsim.mitigations.shapes).
DEFAULT_MEMORY_BANDWIDTH = 1.555e12
DEFAULT_FLOPS = 19.5e12
POWERSGD_START = 1000
DEFAULT_WIDTH = 1024
# - reduce_bytes (fp16/bf16): NCCL on GPUs sums 16-bit elements at wire speed, so the all-reduce
#   costs its 2 bytes per element (the default). gloo on a CPU sums fp16 in software, element by
#   element: its fp16 all-reduce of 4.2 M elements took 11.7 ms against fp32's 11.9 ms (2 ranks),
#   i.e. about 4 bytes per element. Measured as 4 x t(16-bit all-reduce) / t(fp32 all-reduce) at
#   the same element count (validate.mitigation_probes.ReduceDtypeProbe).
# - chain_overhead (powersgd): powerSGD_hook starts its P all-reduce inside the callback of the
#   uncompressed tensors' all-reduce and its Q all-reduce inside the next callback, each callback
#   then blocking on the all-reduce it started (``.get_future().wait()``): each hop hands the work
#   to another of the backend's threads and wakes a blocked one. On gloo on a shared 2-core VM a
#   hop cost either ~0.1 ms or ~3 ms beyond the all-reduce itself (three 16 KB all-reduces chained
#   so: 6.1 ms; one after another from the main thread: 0.63 ms; 2 ranks), the slow mode when a
#   wake-up waits for a CPU; the validator's trimmed means over 36 rounds: 0.8 and 1.5 ms per hop
#   in two runs. Default 0 (not measured on NCCL); measured by the validator as (chained -
#   sequential) / 2 over three all-reduces of the hook's own sizes, the chain run right after
#   another chain, as each step's runs after the previous step's (right after sequential
#   all-reduces gloo runs a chain in a fast mode: 0.8 ms median for three 16 KB all-reduces on 2
#   ranks, 4.8 ms after a chain; 4.3-6.1 ms stamped in the steps)
#   (validate.mitigation_powersgd_probes.ChainProbe).
# - mq_flops, mtp_flops, pqt_flops (powersgd): the rate of each of the hook's three products,
#   P = M Q, Q = M^T P and M = P Q^T, when they differ (default: `flops` for each). On a CPU the
#   transposed one reads M across its rows: at width 1024, r = 4 on gloo's 2-core VM, M^T P took
#   3.7 ms alone and 7-8 ms with both ranks in it while M Q and P Q^T took ~0.9 ms each, so one
#   rate for the three moves most of Q's work before the P all-reduce and after the Q one.
#   Measured by the validator per product, at the products' shapes (validate.mitigation_sampler.HardwareSampler).
# - wake_overhead (powersgd): seconds a rank that arrived first at the hook's first all-reduce
#   (the uncompressed tensors') and blocked on it loses after the last rank's launch, beyond the
#   same chain run with the ranks arriving together: the blocked rank's backend thread is woken
#   from a wait on the network (on a loaded CPU it waits for a core). Once per bucket, after that
#   all-reduce (the P and Q hops after it are chain_overhead's). Default 0 (not measured on
#   NCCL); measured by the validator (validate.mitigation_powersgd_probes.ChainProbe, the "skewed" chain).
# - subgroup_overhead (localsgd): seconds each bucket's subgroup all-reduce costs on every
#   post-local step beyond its transfer. post_localSGD_hook still calls
#   ``default_hooks._allreduce_fut(subgroup, bucket)`` on a local step: ``div_`` by the subgroup's
#   size, an async ``all_reduce`` on the subgroup and a ``.then`` callback that DDP waits on, even
#   on a one-rank subgroup (one GPU per node), where nothing is sent but the call still goes
#   through the backend's worker thread (on gloo on a shared 2-core VM: 1-17 ms, mean ~4-5 ms, in a
#   step). Default 0 (not measured on NCCL: its launch is in the ring's latency); measured by the
#   validator (validate.mitigation_probes.SubgroupReduceProbe).
# - fresh_bw (powersgd): bytes per second of the hook's two writes into newly allocated memory,
#   ``input_tensor.detach().clone()`` as it enters and the new error ``input_tensor_cp -
#   input_tensor`` after the decompression, each a bucket-sized tensor allocated anew every step.
#   When the allocator hands back memory whose pages are not mapped, each write page-faults the
#   pages in (zeroed by the kernel) and runs several times below the copy rate of mapped memory
#   (`mem_bw`): on gloo's 2-core VM the new 16.8 MB error took 1.4-6 ms (medians, runs of 40
#   steps) in the step, against ~1 ms into a mapped buffer. Default None: `mem_bw` (memory the
#   allocator keeps mapped, as a caching GPU allocator does); measured by the validator
#   (validate.mitigation_powersgd_probes.FreshWriteProbe).
REDUCE_BYTES_DOC = "the bytes per element the 16-bit all-reduce costs, in fp32 all-reduce bytes, like 3.9"
SHAPE_MODELS = ("square", "resnet50")


class MitigationError(InputError):
    """A remedy, a parameter or a combination that cannot be simulated; one line, exit 2."""


@dataclass(frozen=True)
class Compression:
    """fp16_compress_hook / bf16_compress_hook: gradients cast to a 16-bit wire dtype."""

    dtype: str  # "fp16" | "bf16"
    mem_bw: float = DEFAULT_MEMORY_BANDWIDTH
    # bytes per element at which the backend's 16-bit all-reduce runs, in the scenario's all-reduce
    # pricing (REDUCE_BYTES_DOC); None: 2, the bytes it sends
    reduce_bytes: Optional[float] = None
    name: str = "fp16"


@dataclass(frozen=True)
class PowerSGD:
    """powerSGD_hook with PowerSGDState(matrix_approximation_rank=r, start_powerSGD_iter=start)."""

    r: int = 1
    start: int = POWERSGD_START
    shapes: str = "square"
    width: int = DEFAULT_WIDTH
    min_compression_rate: float = 2.0  # torch's default: a matrix is compressed only if it saves 2x
    mem_bw: float = DEFAULT_MEMORY_BANDWIDTH
    flops: float = DEFAULT_FLOPS
    kernel_overhead: float = 5e-6  # seconds per small kernel (GPU launch): PowerSGD runs many
    # seconds each of the hook's two chained all-reduces (P, then Q) adds (CHAIN_OVERHEAD_DOC)
    chain_overhead: float = 0.0
    # per-product rates (P = M Q, Q = M^T P, M = P Q^T), None: `flops` (the notes above)
    mq_flops: Optional[float] = None
    mtp_flops: Optional[float] = None
    pqt_flops: Optional[float] = None
    # seconds per bucket after the first all-reduce, the blocked rank's wake-up (the notes above)
    wake_overhead: float = 0.0
    # bytes/s of the clone and the new error, writes into new memory (the notes above); None: mem_bw
    fresh_bw: Optional[float] = None
    name: str = "powersgd"

    def product_flops(self) -> Tuple[float, float, float]:
        """The rates of M Q, M^T P and P Q^T (each its own key, else `flops`)."""
        return tuple(self.flops if f is None else f for f in (self.mq_flops, self.mtp_flops, self.pqt_flops))


@dataclass(frozen=True)
class Backup:
    """Chen et al. 2016: n + b workers, a step uses the first n gradients."""

    b: int = 1
    name: str = "backup"


@dataclass(frozen=True)
class LocalSGD:
    """PostLocalSGDState(start_localSGD_iter=warmup) + PeriodicModelAverager(period=H)."""

    H: int = 8
    warmup: int = 0
    mem_bw: float = DEFAULT_MEMORY_BANDWIDTH  # the averager's flatten and divide run at it
    # seconds per bucket of each post-local step's subgroup all-reduce beyond its transfer (the notes above)
    subgroup_overhead: float = 0.0
    name: str = "localsgd"


@dataclass(frozen=True)
class AsyncPS:
    """Asynchronous SGD: workers push gradients to `servers` parameter servers and pull parameters."""

    servers: int = 1
    bandwidth: Optional[float] = None  # each server's link, bytes/s; None: the cluster's inter_node
    latency: Optional[float] = None    # each transfer's latency; None: the cluster's inter_node
    name: str = "async"


@dataclass(frozen=True)
class Buckets:
    """A 1-D search of DDP's bucket cap for the lowest mean step time."""

    name: str = "buckets"


Remedy = Any  # one of the records above


@dataclass(frozen=True)
class Mitigation:
    """One column of the comparison: one remedy, or a combination (fp16+powersgd)."""

    label: str
    remedies: Tuple[Remedy, ...]

    def get(self, kind: type) -> Optional[Remedy]:
        """The remedy of this type in the combination, or None."""
        return next((r for r in self.remedies if isinstance(r, kind)), None)


# remedy name -> (record factory, {parameter: (parser, what is expected)})
# Rates and times are held to the scenario's plausibility limits (read_rate: at least MIN_RATE
# B/s; read_time_or_zero: at most MAX_TIME s), as the links and compute they stand beside are:
# mem_bw=1e-308 or kernel_overhead=1e308 would turn every step time into inf and the rows into NaN.
# reduce_bytes: at most a million times fp32's 4 bytes (MIN_FRACTION: a million times slower is
# dead); 1e308 overflowed the priced bytes to inf, which the all-reduce's kernel refuses.
MAX_REDUCE_BYTES = 4.0 / MIN_FRACTION


def _positive(value) -> float:
    number = parse_number(value)
    if number <= 0:
        raise ValueError("not above 0")
    return number


def _reduce_bytes(value) -> float:
    number = _positive(value)
    if number > MAX_REDUCE_BYTES:
        raise ValueError(f"above {MAX_REDUCE_BYTES:g}")
    return number


def _dtype(name):
    return lambda **kw: Compression(dtype=name, name=name, **kw)


PARAMETERS: Dict[str, Dict[str, Tuple[Any, str]]] = {
    "fp16": {"mem_bw": (read_rate, "a memory bandwidth like 900GB/s"), "reduce_bytes": (_reduce_bytes, REDUCE_BYTES_DOC)},
    "bf16": {"mem_bw": (read_rate, "a memory bandwidth like 900GB/s"), "reduce_bytes": (_reduce_bytes, REDUCE_BYTES_DOC)},
    "powersgd": {
        "r": (parse_count, "a whole number >= 1"),
        "start": (lambda v: parse_count(v, allow_zero=True), "a whole number >= 0"),
        "shapes": (str, f"one of {', '.join(SHAPE_MODELS)}"),
        "width": (parse_count, "a whole number >= 1"),
        "mem_bw": (read_rate, "a memory bandwidth like 900GB/s"),
        "flops": (lambda v: float(parse_count(v)), "a matmul rate in FLOP/s like 15e12"),
        "kernel_overhead": (read_time_or_zero, "a time like 5us"),
        "chain_overhead": (read_time_or_zero, "a time like 2ms"),
        "mq_flops": (lambda v: float(parse_count(v)), "a matmul rate in FLOP/s like 15e12"),
        "mtp_flops": (lambda v: float(parse_count(v)), "a matmul rate in FLOP/s like 15e12"),
        "pqt_flops": (lambda v: float(parse_count(v)), "a matmul rate in FLOP/s like 15e12"),
        "wake_overhead": (read_time_or_zero, "a time like 2ms"),
        "fresh_bw": (read_rate, "a memory bandwidth like 5GB/s"),
    },
    "backup": {"b": (parse_count, "a whole number >= 1")},
    "localsgd": {"H": (parse_count, "a whole number >= 1"),
                 "warmup": (lambda v: parse_count(v, allow_zero=True), "a whole number >= 0"),
                 "mem_bw": (read_rate, "a memory bandwidth like 900GB/s"),
                 "subgroup_overhead": (read_time_or_zero, "a time like 4ms")},
    "async": {"servers": (parse_count, "a whole number >= 1"),
              "bandwidth": (read_rate, "a link bandwidth like 25Gbps"),
              "latency": (read_time_or_zero, "a time like 10us")},
    "buckets": {},
}
FACTORIES = {"fp16": _dtype("fp16"), "bf16": _dtype("bf16"), "powersgd": PowerSGD, "backup": Backup,
             "localsgd": LocalSGD, "async": AsyncPS, "buckets": Buckets}
REMEDIES = tuple(PARAMETERS)
# pairs (sorted names) that one run can combine: torch's fp16/bf16_compress_wrapper(powerSGD_hook)
COMBINABLE = {("fp16", "powersgd"), ("bf16", "powersgd")}
DEFAULT_MITIGATIONS = "fp16,powersgd:r=4,backup:b=2,localsgd:H=8,async:servers=4,buckets"

_WHY_NOT = {
    "backup": "backup workers replace the all-reduce by the first n gradients",
    "async": "asynchronous SGD replaces the all-reduce by parameter servers",
    "buckets": "bucket tuning searches the plain DDP run",
    "localsgd": "post-local SGD is DDP's one communication hook",
}


def build_remedy(name: str, params: Mapping[str, Any], source: str, where: str) -> Remedy:
    """One remedy record from its name and raw parameter values; `where` is its key path."""
    if name not in PARAMETERS:
        raise MitigationError(source, where, f"unknown remedy; expected one of {', '.join(REMEDIES)}, got {name!r}")
    allowed = PARAMETERS[name]
    values = {}
    for key, raw in params.items():
        path = f"{where}.{key}"
        if key not in allowed:
            expected = ", ".join(allowed) if allowed else "none (it takes no parameters)"
            raise MitigationError(source, path, f"unknown parameter of {name}; expected {expected}, got {key!r}")
        parser, expected = allowed[key]
        try:
            value = parser(raw)
        except (ValueError, TypeError) as exc:
            raise MitigationError(source, path, f"expected {expected}, got {describe(raw)} ({exc})") from None
        if key == "shapes" and value not in SHAPE_MODELS:
            raise MitigationError(source, path, f"expected {expected}, got {describe(raw)}")
        values[key] = value
    return FACTORIES[name](**values)


def combine(label: str, remedies, source: str, where: str) -> Mitigation:
    """A :class:`Mitigation`; refuses a combination that no torch setup can run (module docstring)."""
    names = [r.name for r in remedies]
    if len(set(names)) != len(names):
        raise MitigationError(source, where, f"a remedy given twice in one combination: {label!r}")
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if tuple(sorted((a, b))) not in COMBINABLE:
                why = _WHY_NOT.get(a) or _WHY_NOT.get(b) or "DDP takes one communication hook"
                raise MitigationError(source, where, f"{a} cannot be combined with {b} ({why}); "
                                      f"combinable: fp16+powersgd, bf16+powersgd")
    return Mitigation(label=label, remedies=tuple(remedies))


def parse_mitigations(text: str, source: str = "--mitigations") -> Tuple[Mitigation, ...]:
    """Parse the ``--mitigations`` syntax (module docstring) into mitigations, in order."""
    source = f"{source} {text!r}"
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise MitigationError(source, None, f"expected remedies like {DEFAULT_MITIGATIONS}, got nothing")
    out = []
    for item in items:
        if not item:
            raise MitigationError(source, None, "expected a remedy between two commas, got an empty item")
        remedies = []
        for part in item.split("+"):
            name, *pairs = [p.strip() for p in part.split(":")]
            params = {}
            for pair in pairs:
                key, eq, value = pair.partition("=")
                if not eq or not key.strip():
                    raise MitigationError(source, f"{name}", f"expected parameters as key=value after ':', got {pair!r}")
                if key.strip() in params:  # powersgd:r=4:r=5 would quietly run r=5 under that label
                    raise MitigationError(source, f"{name}.{key.strip()}",
                                          f"expected each parameter once, got {key.strip()}="
                                          f"{params[key.strip()]} and {key.strip()}={value.strip()}")
                params[key.strip()] = value.strip()
            remedies.append(build_remedy(name, params, source, name))
        out.append(combine(item, remedies, source, item))
    _unique_labels(out, source)
    return tuple(out)


def parse_section(section: Any, source: str) -> Tuple[Mitigation, ...]:
    """Parse a scenario file's ``mitigation:`` list (module docstring)."""
    if not isinstance(section, list) or not section:
        raise MitigationError(source, "mitigation", f"expected a non-empty list of remedies "
                              f"(- {{remedy: powersgd, r: 4}}), got {describe(section)}")
    out = []
    for i, entry in enumerate(section):
        where = f"mitigation[{i}]"
        if isinstance(entry, str):
            entry = {"remedy": entry}
        if not isinstance(entry, dict) or "remedy" not in entry:
            raise MitigationError(source, where, f"expected a mapping with a 'remedy' key, got {describe(entry)}")
        label = str(entry["remedy"])
        params = {k: v for k, v in entry.items() if k != "remedy"}
        names = [n.strip() for n in label.split("+")]
        if len(names) > 1 and params:
            raise MitigationError(source, where, "parameters of a combination go in the --mitigations syntax "
                                  f"(fp16+powersgd:r=4), got keys {', '.join(map(str, params))}")
        remedies = [build_remedy(n, params if len(names) == 1 else {}, source, where) for n in names]
        suffix = "".join(f":{k}={v}" for k, v in params.items())
        out.append(combine(label + suffix, remedies, source, where))
    _unique_labels(out, source)
    return tuple(out)


def _unique_labels(mitigations, source):
    # compared by what runs, not by the text: powersgd:r=4 and powersgd:r=04 (or fp16+powersgd
    # and powersgd+fp16) are the same run under two labels
    seen = {}
    for m in mitigations:
        key = tuple(sorted(m.remedies, key=lambda r: r.name))
        if m.label in seen.values() or key in seen:
            same = f" ({seen[key]!r} and {m.label!r})" if key in seen and seen[key] != m.label else ""
            raise MitigationError(source, m.label, f"the same remedy is listed twice{same}")
        seen[key] = m.label


def check_against(mitigation: Mitigation, world_size: int, source: str, min_dimension: Optional[int] = None) -> None:
    """Refuse parameters the scenario cannot take: b >= n workers, r above a gradient's dimension."""
    # the parameter's path as the parser names it (backup.b, powersgd.r), not the label's
    # ('backup:b=2.b'), which repeats the value and reads as no key path
    backup = mitigation.get(Backup)
    if backup is not None and backup.b >= world_size:
        raise MitigationError(source, "backup.b", f"expected fewer backup workers than the {world_size} "
                              f"workers whose gradients each step needs (b < n), got b={backup.b}")
    psgd = mitigation.get(PowerSGD)
    if psgd is not None and min_dimension is not None and psgd.r > min_dimension:
        raise MitigationError(source, "powersgd.r", f"expected a rank no larger than the smallest compressed "
                              f"gradient dimension ({min_dimension} with shapes={psgd.shapes}), got r={psgd.r}")
