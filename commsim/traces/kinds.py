"""Names as the traces write them -> one vocabulary: collective kinds, dtypes, NCCL kernels.

Collective names come in several spellings: ``record_param_comms`` writes c10d's ("allreduce",
"_allgather_base"), the process groups' own annotations write "gloo:all_reduce" /
"nccl:all_reduce", the dispatcher's ops are "c10d::allreduce_", the Flight Recorder writes
the annotation names, and NCCL's kernels carry CamelCase ("ncclDevKernel_AllReduce_Sum_f32_RING_LL",
older releases "ncclKernel_AllReduce_RING_LL_Sum_float"). Dtypes likewise: c10's ScalarType
names ("Float", "BFloat16") in the comms metadata and the Flight Recorder, C++ type names
("float", "c10::BFloat16") in the profiler's "Input type".
"""

from __future__ import annotations

import re
from typing import Optional

# c10d / annotation spellings -> kind (nccl-tests' names, underscored)
_KINDS = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allreduce_sparse": "all_reduce",
    "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_base": "all_gather", "all_gather_into_tensor": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "allgather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all", "all_to_all": "all_to_all",
    "all_to_allv": "all_to_all", "all_to_all_single": "all_to_all",
    "gather": "gather", "scatter": "scatter",
    "send": "send", "recv": "recv", "recv_any_source": "recv", "send_recv": "send_recv",
}

# NCCL kernel collective token -> kind; "Generic" kernels say nothing (their metadata does)
_NCCL_KERNELS = {
    "AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send_recv", "Generic": None,
}
NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")

# element sizes by normalized dtype name
DTYPE_BYTES = {
    "fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16, "uint16": 2, "uint32": 4, "uint64": 8,
}
_DTYPES = {
    # c10 ScalarType names (record_param_comms, Flight Recorder)
    "double": "fp64", "float": "fp32", "half": "fp16", "bfloat16": "bf16",
    "long": "int64", "int": "int32", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool",
    "complexfloat": "complex64", "complexdouble": "complex128",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8",
    "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    # C++ type names (the profiler's "Input type")
    "long int": "int64", "int64_t": "int64", "short int": "int16", "signed char": "int8",
    "unsigned char": "uint8", "c10::half": "fp16", "c10::bfloat16": "bf16",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
    "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8",
    # NCCL's own (kernel names, ncclDataType_t)
    "f32": "fp32", "f16": "fp16", "bf16": "bf16", "f64": "fp64", "i32": "int32", "i64": "int64",
    "u8": "uint8", "i8": "int8", "u32": "uint32", "u64": "uint64",
    "fp32": "fp32", "fp16": "fp16", "fp64": "fp64",
}


def collective_kind(name: str) -> Optional[str]:
    """The kind of a collective from any of its names, or None for a name that is no collective.

    Accepts "allreduce", "nccl:all_reduce", "gloo:broadcast", "c10d::allreduce_",
    "c10d::_allgather_base_"."""
    base = name.strip()
    for prefix in ("c10d::", "nccl:", "gloo:", "ucc:", "mpi:", "xccl:"):
        if base.startswith(prefix):
            base = base[len(prefix):]
            break
    base = base.lower()
    if base in _KINDS:
        return _KINDS[base]
    if base.endswith("_") and base[:-1] in _KINDS:  # c10d's in-place ops: allreduce_, broadcast_
        return _KINDS[base[:-1]]
    return None


def is_nccl_kernel(name: str) -> bool:
    return name.startswith(("ncclDevKernel", "ncclKernel"))


def nccl_kernel_kind(name: str) -> Optional[str]:
    """Kind of an NCCL kernel ("Generic" kernels: None). KeyError for a name it does not know."""
    m = NCCL_KERNEL.match(name)
    if not m or m.group(1) not in _NCCL_KERNELS:
        raise KeyError(name)
    return _NCCL_KERNELS[m.group(1)]


def dtype_name(raw: object) -> Optional[str]:
    """Normalized dtype ("fp32", "bf16", ...) of any spelling; None if unknown."""
    if not isinstance(raw, str):
        return None
    key = raw.strip().lower()
    if key.startswith("torch."):
        key = key[len("torch."):]
    if key.startswith("nccl"):  # ncclFloat32 -> float32
        key = key[len("nccl"):]
    aliases = {"float32": "float", "float16": "half", "float64": "double", "int32": "int", "int64": "long",
               "int16": "short", "int8": "char", "uint8": "byte"}
    key = aliases.get(key, key)
    return _DTYPES.get(key)


def nccl_kernel_names() -> str:
    return ", ".join(k for k in _NCCL_KERNELS)
