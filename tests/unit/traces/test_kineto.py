"""Kineto Chrome traces: a real gloo trace of this machine, and NCCL/GPU traces in the documented format."""

import re
from pathlib import Path

import pytest

from commsim.traces.errors import TraceError
from commsim.traces.files import read_bytes, sniff
from commsim.traces.kineto import _rank_list, read_kineto
from commsim.traces.kinds import collective_kind, dtype_name, nccl_kernel_kind
from tests.unit.traces import synth

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"


def _real(name="delay", rank=0):
    p = str(DATA / name / f"rank{rank}.trace.json.gz")
    return read_kineto(sniff(read_bytes(p), p)[1], p)


def test_real_gloo_trace():
    """tests/data/traces/delay: 2 gloo ranks, 10 profiled steps of 5 buckets (README there)."""
    t = _real()
    assert (t.rank, t.world_size, t.backend, t.host, t.device) == (0, 2, "gloo", "vm", "cpu")
    assert [k for k, _, _ in t.steps] == list(range(1, 11))
    ar = [c for c in t.comms if c.kind == "all_reduce"]
    assert len(ar) == 50
    # the model's layers (trace_job defaults): widths 128, 192, ..., 512, so layer i has
    # w_i * w_{i+1} + w_{i+1} parameters; backward order is the last layer first
    widths = [128 + 64 * i for i in range(7)]
    layer_bytes = [4 * (a * b + b) for a, b in zip(widths, widths[1:])]
    first_step = sorted((c for c in ar if c.step == 1), key=lambda c: c.issue)
    assert sum(c.nbytes for c in first_step) == sum(layer_bytes)
    assert first_step[0].nbytes == layer_bytes[-1]
    assert all(c.dtype == "fp32" and c.start is not None and c.end > c.start >= c.issue - 1e-3 for c in ar)
    phases = {i.phase for i in t.intervals}
    assert phases == {"forward", "backward", "optimizer"}
    # every bucket is issued inside its step's backward
    for c in first_step:
        bwd = [i for i in t.intervals if i.phase == "backward" and i.step == 1]
        assert min(i.start for i in bwd) <= c.issue <= max(i.end for i in bwd) + 1e-3


def test_nccl_gpu_trace_in_the_documented_format():
    steps = synth.plan(2, 3, sizes=(800_000, 400_000))
    doc = synth.kineto(1, 2, steps[1], gpu=True, seq=True)
    t = read_kineto(doc, "rank1.json")
    assert (t.rank, t.world_size, t.backend, t.device) == (1, 2, "nccl", "gpu")
    assert [c.seq for c in t.comms] == [1, 2, 3, 4, 5, 6]
    assert [c.nbytes for c in t.comms] == [800_000, 400_000] * 3
    first = steps[1][0].buckets[0]
    c = t.comms[0]
    assert c.issue == pytest.approx(first[1], abs=1e-9)
    assert c.start == pytest.approx(max(first[1], first[2]), abs=1e-9)
    assert c.end == pytest.approx(first[3], abs=1e-9)
    # compute comes from the kernels, each in the phase of the CPU span that launched it
    assert {i.phase for i in t.intervals} == {"forward", "backward", "optimizer"}
    assert all(i.step in (1, 2, 3) for i in t.intervals)


def test_kernels_pair_by_order_without_sequence_numbers():
    steps = synth.plan(2, 2)
    t = read_kineto(synth.kineto(0, 2, steps[0], gpu=True, seq=False), "rank0.json")
    for c, b in zip(t.comms, [b for st in steps[0] for b in st.buckets]):
        assert c.seq is None
        assert c.end == pytest.approx(b[3], abs=1e-9)


def test_unknown_nccl_kernel_is_named():
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True, kernel_name="ncclDevKernel_Frobnicate_Sum_f32(x)")
    with pytest.raises(TraceError, match=r"rank0\.json: traceEvents\[\d+\]\.name: unknown NCCL kernel "
                                         r"'ncclDevKernel_Frobnicate_Sum_f32'"):
        read_kineto(doc, "rank0.json")


def test_unknown_dtype_is_named():
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    for e in doc["traceEvents"]:
        if e["name"] == "record_param_comms":
            e["args"]["dtype"] = "Quaternion"
            break
    with pytest.raises(TraceError, match=r"traceEvents\[\d+\]\.args\.dtype: unknown dtype 'Quaternion'"):
        read_kineto(doc, "rank0.json")


def test_rank_from_metadata_then_file_name():
    doc = synth.kineto(3, 4, synth.plan(4, 1)[3], dist_info=False)
    assert read_kineto(doc, "/x/job_rank3.json").rank == 3
    with pytest.raises(TraceError, match="cannot tell which rank recorded this trace"):
        read_kineto(doc, "/x/trace.json")


@pytest.mark.parametrize("key,value,expected", [
    ("dur", -5.0, "expected a finite duration >= 0"),
    ("dur", float("inf"), "expected a finite duration >= 0"),
    ("dur", float("nan"), "expected a finite duration >= 0"),
    # -1e308 overflowed the ranks' common origin in nanoseconds when the job was assembled
    ("ts", -1e308, "expected a start time within"),
    ("ts", 1e300, "expected a start time within"),
    ("ts", 2.0**63, "expected a start time within"),
])
def test_an_events_time_out_of_range_is_named(key, value, expected):
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("ph") == "X" and e.get("dur"))
    doc["traceEvents"][i][key] = value
    with pytest.raises(TraceError, match=rf"rank0\.json: traceEvents\[{i}\]\.{key}: {expected}"):
        read_kineto(doc, "rank0.json")


def test_a_boolean_timestamp_is_not_a_number():
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("ph") == "X")
    doc["traceEvents"][i]["ts"] = True
    with pytest.raises(TraceError, match=rf"traceEvents\[{i}\]: expected numeric ts and dur, got True"):
        read_kineto(doc, "rank0.json")


def test_no_complete_events():
    with pytest.raises(TraceError, match=r"e\.json: traceEvents: no complete"):
        read_kineto({"traceEvents": [{"ph": "M", "name": "process_name"}]}, "e.json")


def test_truncated_rank_lists_are_completed_when_they_are_a_progression():
    assert _rank_list("[0, 1, 2, 3]", 4, "w", "s") == (0, 1, 2, 3)
    # record_param_comms cuts lists past 30 ranks: "[0, 1, ..., 28, ..., 127]"
    cut = "[" + ", ".join(str(i) for i in range(29)) + ", ..., 127]"
    assert _rank_list(cut, 128, "w", "s") == tuple(range(128))
    strided = "[" + ", ".join(str(2 * i) for i in range(29)) + ", ..., 126]"
    assert _rank_list(strided, 64, "w", "s") == tuple(range(0, 128, 2))
    assert _rank_list("[0, 5, 7, ..., 99]", 40, "w", "s") is None  # not a progression: unknown
    with pytest.raises(TraceError, match="expected a list of ranks"):
        _rank_list("[0, one]", 2, "w", "s")


def test_truncated_rank_list_in_a_trace_is_read():
    cut = "[" + ", ".join(str(i) for i in range(29)) + ", ..., 63]"
    doc = synth.kineto(0, 64, synth.plan(64, 1)[0], gpu=True, ranks_arg=cut)
    t = read_kineto(doc, "rank0.json")
    assert all(c.group_ranks == tuple(range(64)) for c in t.comms)


def test_names():
    assert collective_kind("c10d::allreduce_") == "all_reduce"
    assert collective_kind("nccl:all_reduce") == "all_reduce"
    assert collective_kind("_allgather_base") == "all_gather"
    assert collective_kind("gloo:broadcast") == "broadcast"
    assert collective_kind("c10d::wait") is None
    assert nccl_kernel_kind("ncclKernel_AllReduce_RING_LL_Sum_float(x)") == "all_reduce"
    assert nccl_kernel_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_SIMPLE") == "reduce_scatter"
    assert dtype_name("BFloat16") == dtype_name("c10::BFloat16") == "bf16"
    assert dtype_name("float") == dtype_name("Float") == "fp32"
    assert dtype_name("long int") == "int64"


@pytest.mark.parametrize("key", ["ts", "dur"])
def test_an_integer_past_floats_range_is_named_not_an_overflow(key):
    # JSON's integers are unbounded: math.isfinite(10**400) raised OverflowError (a traceback)
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("ph") == "X" and e.get("dur"))
    doc["traceEvents"][i][key] = 10**400
    where = rf"traceEvents\[{i}\]" + (r"\.dur" if key == "dur" else "")
    with pytest.raises(TraceError, match=rf"rank0\.json: {where}: expected"):
        read_kineto(doc, "rank0.json")


def test_a_base_time_past_int64_is_named():
    # it was added to the origin in nanoseconds, and the ranks' alignment overflowed a float
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    doc["baseTimeNanoseconds"] = 2**63
    with pytest.raises(TraceError, match=r"rank0\.json: baseTimeNanoseconds: expected nanoseconds since the epoch"):
        read_kineto(doc, "rank0.json")
    doc["baseTimeNanoseconds"] = 2**63 - 1
    assert read_kineto(doc, "rank0.json").origin_ns >= 2**63 - 1


@pytest.mark.parametrize("base", [1.5e9 + 0.5, "1700000000000000000", -1, True, None])
def test_a_base_time_that_is_no_nanosecond_count_is_named(base):
    # read as 0 before: the error it led to blamed "ranks from different jobs", not this key
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    doc["baseTimeNanoseconds"] = base
    with pytest.raises(TraceError, match=r"rank0\.json: baseTimeNanoseconds: expected nanoseconds since the epoch"):
        read_kineto(doc, "rank0.json")


def test_a_base_time_written_as_a_whole_float_is_read():
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    doc["baseTimeNanoseconds"] = 1.7e18
    assert read_kineto(doc, "rank0.json").origin_ns >= 17 * 10**17


def _first_op(doc, name):
    return next(e for e in doc["traceEvents"] if e["name"] == name)


@pytest.mark.parametrize("key, value, expected", [
    ("In msg nelems", float("inf"), "an element count (an integer), got inf"),  # OverflowError traceback
    ("In msg nelems", 2.5, "an element count (an integer), got 2.5"),  # int() truncated it
    ("In msg nelems", True, "an element count (an integer), got True"),
    ("In msg nelems", -100, "an element count (an integer >= 0), got -100"),  # negative bytes
    ("Group size", float("inf"), "a group size (an integer), got inf"),
    ("Group size", 0, "a group size (an integer >= 1), got 0"),
    ("Seq", float("inf"), "a sequence number (an integer), got inf"),
])
def test_a_bad_integer_arg_is_named_not_a_traceback(key, value, expected):
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True, seq=True)
    _first_op(doc, "record_param_comms")["args"][key] = value
    with pytest.raises(TraceError, match=rf"rank0.json: traceEvents\[\d+\]\.args\.{key}: expected " + re.escape(expected)):
        read_kineto(doc, "rank0.json")


@pytest.mark.parametrize("ranks", ["[-1, 1]", [-1, 1]])
def test_a_negative_group_rank_is_named(ranks):
    # it indexed the ranks' list from its end downstream
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    _first_op(doc, "record_param_comms")["args"]["Process Group Ranks"] = ranks
    with pytest.raises(TraceError, match=r"Process Group Ranks: expected a list of ranks \(integers >= 0\)"):
        read_kineto(doc, "rank0.json")
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    doc["distributedInfo"] = {"rank": 0, "world_size": 2, "pg_config": [{"pg_name": "0", "ranks": [-1, 1]}]}
    with pytest.raises(TraceError, match=r"distributedInfo\.pg_config\[0\]\.ranks: expected a list of ranks"):
        read_kineto(doc, "rank0.json")


@pytest.mark.parametrize("config", [-1, 5, 1e308, float("nan"), 2**64, "abc", {"pg_name": "0"}])
def test_a_pg_config_that_is_no_list_is_named(config):
    # a number there ended in iter()'s TypeError ('int' object is not iterable), a traceback
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    doc["distributedInfo"] = {"rank": 0, "world_size": 2, "pg_config": config}
    with pytest.raises(TraceError, match=r"rank0.json: distributedInfo\.pg_config: expected a list of process groups"):
        read_kineto(doc, "rank0.json")
    doc["distributedInfo"]["pg_config"] = None  # no groups said: the trace's ops name them
    read_kineto(doc, "rank0.json")


@pytest.mark.parametrize("dims", [[[-100]], [[True]]])
def test_a_negative_or_boolean_input_dim_is_no_size(dims):
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0])
    _first_op(doc, "gloo:all_reduce")["args"]["Input Dims"] = dims
    with pytest.raises(TraceError, match=r"gloo:all_reduce without its input's dims"):
        read_kineto(doc, "rank0.json")


def test_input_dims_past_int64_are_exact():
    # np.prod wrapped [2**32, 2**32] to 0 elements in int64
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0])
    _first_op(doc, "c10d::allreduce_")["args"]["Input Dims"] = [[[2**32, 2**32]], [], [], [], [], []]
    _first_op(doc, "gloo:all_reduce")["args"]["Input Dims"] = [[2**32, 2**32]]
    assert max(c.nbytes for c in read_kineto(doc, "rank0.json").comms) == 4 * 2**64


def test_a_start_time_on_the_epoch_clock_still_reads():
    doc = synth.kineto(0, 2, synth.plan(2, 1)[0], gpu=True)
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] + 1.7e15  # microseconds since 1970, as some profilers write them
    assert read_kineto(doc, "rank0.json").rank == 0
