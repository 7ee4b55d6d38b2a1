"""Flight Recorder dumps: the restricted unpickler, real gloo dumps, the documented NCCL layout."""

import os
import pickle
from pathlib import Path

import pytest

from commsim.traces.errors import TraceError
from commsim.traces.files import read_bytes, sniff
from commsim.traces.flight_recorder import rank_from_name, read_flight_recorder, safe_unpickle
from tests.unit.traces import synth

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"


class _Payload:
    """Unpickling this runs code: it asks pickle to call a function with an argument."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_hostile_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    data = pickle.dumps({"entries": [_Payload(str(marker))], "pg_config": {}})
    assert not marker.exists()
    with pytest.raises(TraceError, match=r"dump\.pkl: refusing to load this pickle: it asks for posix\.mkdir"):
        safe_unpickle(data, "dump.pkl")
    assert not marker.exists()
    # the same bytes through pickle.loads would have run it: the test's payload is live
    pickle.loads(data)
    assert marker.exists()


def test_every_global_is_refused_even_harmless_ones():
    data = pickle.dumps({"entries": [], "when": __import__("datetime").date(2024, 1, 1)})
    with pytest.raises(TraceError, match="asks for datetime.date"):
        safe_unpickle(data, "d.pkl")


def test_plain_containers_and_scalars_load():
    doc = {"a": [1, 2.5, None, True, "x", 2**70], "b": (1, 2), "c": {"d": [(), []]}}
    for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):  # torch's dumps are protocol 2
        assert safe_unpickle(pickle.dumps(doc, protocol=proto), "p") == doc
    richer = {"bytes": b"y", "set": {3, 4}, "frozen": frozenset({5})}  # opcodes of their own from protocol 4
    assert safe_unpickle(pickle.dumps(richer, protocol=4), "p") == richer


def test_truncated_pickle():
    data = pickle.dumps({"entries": list(range(100))})
    with pytest.raises(TraceError, match="not a readable Flight Recorder dump: truncated pickle"):
        safe_unpickle(data[:-10], "p.pkl")


def test_rank_from_file_name():
    assert rank_from_name("/x/rank3.fr.pkl") == 3
    assert rank_from_name("nccl_trace_rank_12") == 12
    assert rank_from_name("fr_dump_7") == 7
    assert rank_from_name("dump.pkl") is None


def test_real_gloo_dumps_of_this_torch_build():
    """Recorded by validate/trace_job.py with gloo (tests/data/traces/README.md): this build
    writes gloo dumps with creation times only (state 'scheduled', no start or end)."""
    p = str(DATA / "delay" / "rank1.fr.pkl")
    fmt, doc = sniff(read_bytes(p), p)
    assert fmt == "flight-recorder"
    t = read_flight_recorder(doc, p)
    assert t.rank == 1 and t.world_size == 2 and t.backend == "gloo"
    assert t.groups == (("0", (0, 1)),)
    kinds = {c.kind for c in t.comms}
    assert "all_reduce" in kinds
    seqs = [c.seq for c in sorted(t.comms, key=lambda c: c.order)]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(c.start is None and c.end is None for c in t.comms)
    assert all(c.nbytes > 0 and c.dtype for c in t.comms if c.kind != "barrier")  # a barrier moves no tensor


def test_documented_nccl_layout_gives_start_and_end():
    """No NCCL here: a dump built from the documented format (tools/flight_recorder)."""
    steps = synth.plan(2, 2)
    doc = synth.flight_recorder(0, 2, steps[0], nccl=True)
    t = read_flight_recorder(doc, "dump_rank0")
    assert t.rank == 0 and t.backend == "nccl" and t.device == "gpu"
    assert len(t.comms) == 4
    first = min(t.comms, key=lambda c: c.issue)
    b = steps[0][0].buckets[0]
    assert first.nbytes == b[0]
    assert first.end - first.issue == pytest.approx(b[3] - b[1], abs=2e-9)


def test_bad_entries_name_the_key():
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0])
    doc["entries"][1]["time_created_ns"] = "soon"
    with pytest.raises(TraceError, match=r"d_rank0: entries\[1\]\.time_created_ns: expected int, got 'soon'"):
        read_flight_recorder(doc, "d_rank0")
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0])
    doc["entries"][0]["profiling_name"] = "nccl:frobnicate"
    with pytest.raises(TraceError, match=r"entries\[0\]\.profiling_name: unknown collective 'nccl:frobnicate'"):
        read_flight_recorder(doc, "d_rank0")
    with pytest.raises(TraceError, match="does not say its rank"):
        read_flight_recorder(synth.flight_recorder(0, 2, synth.plan(2, 1)[0]), "dump.pkl")


@pytest.mark.parametrize("duration", [float("nan"), float("inf"), -1.0])
def test_a_bad_duration_is_named_not_a_traceback(duration):
    """Without time_discovered_completed_ns the end is started + duration_ms: NaN or inf cannot
    become nanoseconds (a ValueError/OverflowError before), a negative one runs backwards."""
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0], nccl=True)
    doc["entries"][1]["time_discovered_completed_ns"] = None
    doc["entries"][1]["duration_ms"] = duration
    with pytest.raises(TraceError, match=r"d_rank0: entries\[1\]\.duration_ms: expected a finite duration >= 0"):
        read_flight_recorder(doc, "d_rank0")


def test_a_collective_that_ends_before_it_starts_is_refused():
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0], nccl=True)
    e = doc["entries"][0]
    e["time_discovered_completed_ns"] = e["time_discovered_started_ns"] - 1
    with pytest.raises(TraceError, match=r"entries\[0\]\.time_discovered_completed_ns: expected a time at or after"):
        read_flight_recorder(doc, "d_rank0")


def test_the_end_comes_from_the_duration_without_a_completion_time():
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0], nccl=True)
    whole = read_flight_recorder(doc, "d_rank0")
    for e in doc["entries"]:
        e["time_discovered_completed_ns"] = None
    from_duration = read_flight_recorder(doc, "d_rank0")
    assert [c.end for c in from_duration.comms] == pytest.approx([c.end for c in whole.comms], abs=2e-9)


@pytest.mark.parametrize("key", ["time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns"])
@pytest.mark.parametrize("value", [10**400, 2**63, -1])
def test_a_stamp_outside_int64_is_named_not_an_overflow(key, value):
    # 10**400 (a pickle's or JSON's int has no bound) was an OverflowError traceback in the
    # times in seconds; the dump's stamps are int64 nanoseconds
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0], nccl=True)
    doc["entries"][1][key] = value
    if key == "time_discovered_started_ns":
        doc["entries"][1]["time_discovered_completed_ns"] = None
    with pytest.raises(TraceError, match=rf"d_rank0: entries\[1\]\.{key}: expected nanoseconds from 0 to 2\*\*63 - 1"):
        read_flight_recorder(doc, "d_rank0")


@pytest.mark.parametrize("duration", [10**400, 1e308, 2**63 / 1e6])
def test_a_duration_past_int64_nanoseconds_is_named(duration):
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0], nccl=True)
    doc["entries"][1]["time_discovered_completed_ns"] = None
    doc["entries"][1]["duration_ms"] = duration
    with pytest.raises(TraceError, match=r"d_rank0: entries\[1\]\.duration_ms: expected a finite duration >= 0"):
        read_flight_recorder(doc, "d_rank0")


@pytest.mark.parametrize("ranks", [[float("nan"), 1], [float("inf"), 1], [{}, 1], [-1, 1], [True, 1], "[0, -1]"])
def test_a_bad_process_group_rank_is_named_not_a_traceback(ranks):
    # NaN, inf and a mapping were a ValueError/OverflowError/TypeError traceback from int(); a
    # negative rank an IndexError in the matching (a list indexed from its end)
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0])
    doc["pg_config"]["0"]["ranks"] = ranks
    with pytest.raises(TraceError, match=r"d_rank0: pg_config\['0'\]\.ranks: expected a list of ranks \(integers >= 0\)"):
        read_flight_recorder(doc, "d_rank0")


@pytest.mark.parametrize("shape", [[-4], [True], [2.5], [2**32, 2**32, 2]])
def test_a_bad_tensor_size_is_named_not_read(shape):
    # a negative or boolean dimension was read as bytes; np.prod wrapped [2**32, 2**32, 2] to 0
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0])
    doc["entries"][1]["input_sizes"] = [shape]
    with pytest.raises(TraceError, match=r"d_rank0: entries\[1\]\.input_sizes: expected (a tensor size|tensors of fewer)"):
        read_flight_recorder(doc, "d_rank0")


def test_tensor_sizes_are_exact_past_int64_products():
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0])
    doc["entries"][1]["input_sizes"] = [[2**20, 2**20], []]  # a scalar counts one element
    doc["entries"][1]["input_dtypes"] = ["Float", "Float"]
    t = read_flight_recorder(doc, "d_rank0")
    assert max(c.nbytes for c in t.comms) == 4 * 2**40 + 4
