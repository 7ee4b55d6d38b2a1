"""Gradient compression as DDP communication hooks: fp16/bf16 casts and PowerSGD.

Both are hooks for :func:`commsim.mitigations.hooked.run_hooked` (stages per bucket).

**fp16 / bf16** (``torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook``,
``bf16_compress_hook``): per bucket, ``buffer.to(fp16).div_(world_size)`` (read e bytes and write 2
per element, then read and write 2 more), an all-reduce of 2 bytes per element, and the copy back
into the e-byte bucket (read 2, write e). The casts run at the remedy's memory bandwidth
(``mem_bw``). A scenario whose gradients are already 16-bit gains no bytes and pays the casts.
The all-reduce sends 2 bytes per element and takes the time of the scenario's all-reduce of
``reduce_bytes`` bytes per element (default 2: a byte-bound all-reduce, as NCCL's on GPUs; gloo on
a CPU sums fp16 in software, its fp16 all-reduce about as slow as fp32's: ``reduce_bytes`` ~4,
measured by the validator as 4 x the ratio of the two all-reduces' times at the bucket's elements).

**PowerSGD** (Vogels et al. 2019, "PowerSGD: Practical Low-Rank Gradient Compression for
Distributed Optimization"; ``powerSGD_hook.powerSGD_hook``): 1-D gradients, and matrices where
compression saves less than ``min_compression_rate`` (``(m + n) r * 2 >= m n``), stay uncompressed;
each other m x n gradient M (convolutions reshaped to (out, in k k)) with rank r' = min(m, n, r)
is sent as P = M Q (m r') and Q = M^T P (n r'). The hook's order per bucket, as in torch:

    work: M += error; M_in = M.clone(); orthogonalize Q; P = M Q  ->  all-reduce(uncompressed)
    ->  all-reduce(P)  ->  work: orthogonalize P; Q = M^T P  ->  all-reduce(Q)
    ->  work: M = P Q^T; error = M_in - M

Work time: each matmul max(2 m n r' / rate, 4 m n / mem_bw) (a skinny product is memory-bound;
the rate is the product's own, ``mq_flops``, ``mtp_flops`` and ``pqt_flops``, each ``flops``
unless given: on a CPU these run far below a square matmul's rate, the transposed M^T P slowest,
and the validator measures each at its own shape), the error feedback's add and new error
(12 bytes moved per element each) and its copy of the input (``input_tensor.detach().clone()``, 8
bytes): the add in place at ``mem_bw``, the clone and the new error, each a tensor allocated
anew every step, at ``fresh_bw`` (writes that may page-fault: commsim.mitigations.spec; default
``mem_bw``), each orthogonalization (of Q before its product, with warm start, and of P
after its all-reduce) 2 m r'^2 / flops, and ``kernel_overhead`` per kernel
(:data:`KERNELS_PER_MATRIX` per matrix: the add, the clone, 3 products, the new error, 2 for each
orthogonalization). Approximations: each bucket holds its byte share of every kind of tensor
(the uncompressed and compressed elements are spread over the buckets in proportion to their
bytes; real buckets hold whole tensors), and the figures are those after
``start_powerSGD_iter`` (the warm-up steps run plain all-reduces, at the baseline's step time).
The P and Q all-reduces are each started from the callback of the all-reduce before them (the
callback then blocks on it): each such hop costs the remedy's ``chain_overhead`` seconds per
bucket (a backend's figure, not a per-byte one; commsim.mitigations.spec), a stage of work
before each of the two all-reduces; the first of them also carries ``wake_overhead``, once per
bucket: the rank that arrived first at the uncompressed all-reduce blocked on it, and its
backend thread's wake-up delays the chain after the last rank's launch (commsim.mitigations.spec). Every Work stage here runs at the rank's compute factor of
the step (commsim.mitigations.hooked): a slowed rank's products, orthogonalizations and hops are
slowed with it, and the all-reduce after them waits for the slower rank.
Wrapped in fp16/bf16 (``fp16_compress_wrapper(powerSGD_hook)``) everything is sent in 2 bytes
(each all-reduce priced at the wrapper's ``reduce_bytes``, as fp16's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from commsim.mitigations.hooked import PlainHook, Reduce, Stage, Work
from commsim.mitigations.shapes import GradientShapes, gradient_shapes
from commsim.mitigations.spec import Compression, PowerSGD
from commsim.scenario.spec import BYTES_PER_ELEMENT, Scenario

WIRE_BYTES_16 = 2
KERNELS_PER_MATRIX = 10  # add, clone, 3 products, new error, 2 x 2 orthogonalization


class CompressionHook(PlainHook):
    """fp16_compress_hook / bf16_compress_hook (module docstring)."""

    def __init__(self, scenario: Scenario, remedy: Compression):
        self.e = BYTES_PER_ELEMENT[scenario.model.grad_dtype]
        self.bw = remedy.mem_bw
        self.reduce_bytes = remedy.reduce_bytes

    def stages(self, step: int, bucket: int, size: float) -> Sequence[Stage]:
        elements = size / self.e
        cast = elements * (self.e + WIRE_BYTES_16 + 2 * WIRE_BYTES_16) / self.bw
        back = elements * (WIRE_BYTES_16 + self.e) / self.bw
        return (Work(cast), reduce_16(elements, self.reduce_bytes), Work(back))


def reduce_16(elements: float, reduce_bytes: Optional[float]) -> Reduce:
    """The all-reduce of `elements` 16-bit elements: 2 bytes each on the wire, priced as the
    scenario's all-reduce of `reduce_bytes` bytes each (None: of the 2 it sends)."""
    priced = None if reduce_bytes is None else elements * reduce_bytes
    return Reduce(elements * WIRE_BYTES_16, priced_bytes=priced)


@dataclass(frozen=True)
class PowerSGDPlan:
    """Whole-model totals of one PowerSGD step: elements sent and work (seconds)."""

    uncompressed: float  # elements all-reduced as they are
    p_elements: float
    q_elements: float
    compressed_elements: float
    work_p: float  # error add, clone, orthogonalize Q, P = M Q
    work_q: float  # orthogonalize P, Q = M^T P
    work_out: float  # P Q^T + error update
    min_dimension: Optional[int]  # smallest dimension of the compressible matrices
    matrices: int


def _matmul(m: int, n: int, r: int, flops: float, remedy: PowerSGD) -> float:
    return max(2.0 * m * n * r / flops, 4.0 * m * n / remedy.mem_bw)


def plan_powersgd(shapes: GradientShapes, remedy: PowerSGD) -> PowerSGDPlan:
    """Split the gradients into uncompressed and compressed, and total the work (module docstring)."""
    unc = float(shapes.vector_elements)
    p = q = comp = 0.0
    wp = wq = wo = 0.0
    count = 0
    dims = []
    ovh = remedy.kernel_overhead
    f_mq, f_mtp, f_pqt = remedy.product_flops()
    fresh = remedy.mem_bw if remedy.fresh_bw is None else remedy.fresh_bw  # the writes into new memory
    for m, n in shapes.matrices:
        r = min(m, n, remedy.r)
        if (m + n) * r * remedy.min_compression_rate >= m * n:  # torch's _should_compress
            unc += m * n
            continue
        dims.append(min(m, n))
        count += 1
        p += m * r
        q += n * r
        comp += m * n
        add = 12.0 * m * n / remedy.mem_bw  # M += error in place: read two, write one
        clone = 8.0 * m * n / fresh  # M_in = M.clone() into new memory: read one, write one
        new_error = 12.0 * m * n / fresh  # error = M_in - M, a new tensor: read two, write one
        wp += add + clone + 2.0 * n * r * r / remedy.flops + _matmul(m, n, r, f_mq, remedy) + 5 * ovh
        wq += 2.0 * m * r * r / remedy.flops + _matmul(m, n, r, f_mtp, remedy) + 3 * ovh
        wo += _matmul(m, n, r, f_pqt, remedy) + new_error + (KERNELS_PER_MATRIX - 8) * ovh
    return PowerSGDPlan(unc, p, q, comp, wp, wq, wo, min(dims) if dims else None, count)


def powersgd_plan_for(scenario: Scenario, remedy: PowerSGD) -> PowerSGDPlan:
    return plan_powersgd(gradient_shapes(remedy.shapes, scenario.model.parameters, remedy.width), remedy)


def smallest_dimension(scenario: Scenario, remedy: PowerSGD) -> Optional[int]:
    """The smallest dimension among the matrix gradients of the shape model (for the r check)."""
    shapes = gradient_shapes(remedy.shapes, scenario.model.parameters, remedy.width)
    return min((min(m, n) for m, n in shapes.matrices), default=None)


class PowerSGDHook(PlainHook):
    """powerSGD_hook, optionally inside fp16/bf16_compress_wrapper (module docstring)."""

    def __init__(self, scenario: Scenario, remedy: PowerSGD, wrapper: Optional[Compression] = None):
        self.plan = powersgd_plan_for(scenario, remedy)
        self.e = BYTES_PER_ELEMENT[scenario.model.grad_dtype]
        self.wire = WIRE_BYTES_16 if wrapper is not None else self.e
        self.wrapper = wrapper
        self.total = float(scenario.model.grad_bytes)
        self.chain = remedy.chain_overhead
        self.wake = remedy.wake_overhead

    def _reduce(self, elements: float) -> Reduce:
        if self.wrapper is not None:
            return reduce_16(elements, self.wrapper.reduce_bytes)
        return Reduce(elements * self.wire)

    def stages(self, step: int, bucket: int, size: float) -> Sequence[Stage]:
        share = size / self.total
        pl = self.plan
        # the chained hops are per bucket (each bucket runs its own chain of callbacks)
        # the blocked rank's wake-up after the first all-reduce, where the ranks arrive apart
        return (Work(share * pl.work_p), self._reduce(share * pl.uncompressed), Work(self.wake + self.chain),
                self._reduce(share * pl.p_elements), Work(share * pl.work_q), Work(self.chain),
                self._reduce(share * pl.q_elements), Work(share * pl.work_out))

    def compression_ratio(self) -> float:
        pl = self.plan
        return (pl.uncompressed + pl.compressed_elements) * self.e / max(
            (pl.uncompressed + pl.p_elements + pl.q_elements) * self.wire, 1.0)
