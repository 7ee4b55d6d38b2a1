"""A trace entry without a key it needs (Flight Recorder, Kineto) is named as missing, not as holding null."""

import pytest

from commsim.traces.errors import TraceError
from commsim.traces.flight_recorder import read_flight_recorder
from tests.unit.traces import synth


@pytest.mark.parametrize("key, typ", [("time_created_ns", "int"), ("profiling_name", "str"),
                                      ("collective_seq_id", "int"), ("input_sizes", "list")])
def test_a_missing_key_is_said_missing(key, typ):
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0])
    del doc["entries"][1][key]
    with pytest.raises(TraceError, match=rf"d_rank0: entries\[1\]\.{key}: missing key \(expected {typ}\)"):
        read_flight_recorder(doc, "d_rank0")


def test_a_null_is_still_said_null():
    doc = synth.flight_recorder(0, 2, synth.plan(2, 1)[0])
    doc["entries"][1]["time_created_ns"] = None
    with pytest.raises(TraceError, match=r"entries\[1\]\.time_created_ns: expected int, got None"):
        read_flight_recorder(doc, "d_rank0")


def test_a_kineto_event_without_its_start_is_said_missing():
    from commsim.traces.kineto import read_kineto

    doc = synth.kineto(0, 2, synth.plan(2, 1)[0])
    i = next(k for k, e in enumerate(doc["traceEvents"]) if e.get("ph") == "X")
    del doc["traceEvents"][i]["ts"]
    with pytest.raises(TraceError, match=rf"rank0\.json: traceEvents\[{i}\]\.ts: missing key"):
        read_kineto(doc, "rank0.json")
