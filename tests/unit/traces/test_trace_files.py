"""Reading trace files: gzip and JSON failures named in one line, formats told apart by content."""

import gzip
import json

import pytest

from commsim.errors import InputError
from commsim.traces.errors import TraceError
from commsim.traces.files import parse_json, read_bytes, sniff


def test_trace_error_is_an_input_error_with_the_file_first():
    err = TraceError("a.json", "traceEvents[3].dtype", "unknown dtype 'x'")
    assert isinstance(err, InputError)
    assert str(err) == "a.json: traceEvents[3].dtype: unknown dtype 'x'"


def test_gzip_is_read_by_content_not_name(tmp_path):
    p = tmp_path / "trace.json"  # gzip under a .json name
    p.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert read_bytes(str(p)) == b'{"traceEvents": []}'


def test_truncated_gzip(tmp_path):
    p = tmp_path / "t.json.gz"
    events = [{"ph": "X", "name": f"op{i}", "ts": i * 7919 % 10007} for i in range(2000)]
    data = gzip.compress(json.dumps({"traceEvents": events}).encode())
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match=r"t\.json\.gz: truncated gzip file"):
        read_bytes(str(p))


def test_truncated_json_is_named():
    with pytest.raises(TraceError, match=r"^x\.json: truncated JSON: the document ends inside a value"):
        parse_json(b'{"traceEvents": [{"ph": "X", "name": "a"', "x.json")


def test_concatenated_json_is_named():
    with pytest.raises(TraceError, match=r"more than one JSON document \(a second one starts at line 2"):
        parse_json(b'{"traceEvents": []}\n{"traceEvents": []}\n', "x.json")


def test_invalid_json_in_the_middle_is_not_called_truncated():
    with pytest.raises(TraceError, match=r"x\.json: invalid JSON at line 1 column 18: Expecting value"):
        parse_json(b'{"traceEvents": [}, {"a": 1}, {"b": 2}]}', "x.json")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TraceError, match="file not found"):
        read_bytes(str(tmp_path / "nope.json"))
    with pytest.raises(TraceError, match="is a directory"):
        read_bytes(str(tmp_path))


def test_sniff_tells_formats_apart():
    assert sniff(b'{"traceEvents": []}', "a")[0] == "kineto"
    assert sniff(b'[{"ph": "X"}]', "a")[0] == "kineto"
    assert sniff(b'{"entries": [], "pg_config": {}}', "a")[0] == "flight-recorder"
    with pytest.raises(TraceError, match="a JSON document that is no trace: expected 'traceEvents'.*found foo"):
        sniff(b'{"foo": 1}', "a")
    with pytest.raises(TraceError, match="neither a profiler trace"):
        sniff(b"hello", "a")


@pytest.mark.parametrize("path, kind", [("/dev/zero", "a character device"), ("{tmp}/fifo", "a FIFO")])
def test_a_device_or_fifo_is_refused_without_reading_it(tmp_path, path, kind):
    """/dev/zero was read until memory ran out (a MemoryError traceback); a FIFO blocked for a writer."""
    import os

    if path.startswith("{tmp}"):
        path = path.format(tmp=tmp_path)
        os.mkfifo(path)
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist here")
    with pytest.raises(TraceError, match=rf"is {kind}.*, expected a trace file \(a regular file\)"):
        read_bytes(path)


def test_a_gzip_bomb_stops_at_the_limit(tmp_path, monkeypatch):
    import commsim.traces.files as files

    monkeypatch.setattr(files, "MAX_TRACE_BYTES", 1000)
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(b"[" + b" " * 100_000 + b"]"))  # 100 kB of JSON in a few hundred bytes
    assert p.stat().st_size < 1000
    with pytest.raises(TraceError, match=r"bomb\.json\.gz: unzips to more than 1,000 bytes"):
        read_bytes(str(p))
    small = tmp_path / "ok.json.gz"
    small.write_bytes(gzip.compress(b"[" + b" " * 998 + b"]"))  # exactly the limit
    assert len(read_bytes(str(small))) == 1000
    plain = tmp_path / "big.json"
    plain.write_bytes(b"[" + b" " * 1000 + b"]")
    with pytest.raises(TraceError, match=r"big\.json: holds more than 1,000 bytes"):
        read_bytes(str(plain))


def test_a_multi_member_gzip_is_read_whole(tmp_path):
    p = tmp_path / "two.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": ') + gzip.compress(b"[]}"))
    assert read_bytes(str(p)) == b'{"traceEvents": []}'


def test_a_json_number_of_thousands_of_digits_is_named_not_a_traceback(tmp_path):
    # Python's int() refuses over 4,300 digits with a ValueError that is no JSONDecodeError
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": [{"ph": "X", "ts": ' + "1" * 5000 + ', "dur": 1}]}')
    with pytest.raises(TraceError, match="rank0.json: invalid JSON for a trace: a number of more than 4,300 digits"):
        sniff(read_bytes(str(path)), str(path))
