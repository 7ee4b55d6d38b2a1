"""commsim.lab without root: rates and delays, names and addresses, the tc commands, what is missing."""

import pytest

from commsim.errors import InputError
from commsim.lab import LabError, LabSpec, commands, parse_bits, parse_delay
from commsim.lab.testbed import HOST_QUEUE_S, MIN_BURST_BYTES, SWITCH_QUEUE_S, shaping_commands


@pytest.mark.parametrize("text, bits", [
    ("400Mbit", 400e6), ("1Gbit", 1e9), ("1.5Gbit", 1.5e9), ("5000kbit", 5e6), ("5000Kbit", 5e6),
    ("400 Mbit/s", 400e6), ("400Mbps", 400e6), ("12.5e6", 100e6),  # a plain number is bytes/s
])
def test_rates_in_tc_and_commsim_spellings(text, bits):
    assert parse_bits(text) == pytest.approx(bits)


@pytest.mark.parametrize("text, what", [
    ("400MB", "expected a link rate"), ("fast", "expected a link rate"), ("0.5Mbit", "from 1Mbit to 10Gbit"),
    ("100Gbit", "from 1Mbit to 10Gbit"),
])
def test_bad_rates_are_one_line_input_errors(text, what):
    with pytest.raises(LabError, match=what) as exc:
        parse_bits(text, "--slow-bandwidth")
    assert isinstance(exc.value, InputError)
    assert str(exc.value).startswith("--slow-bandwidth: ") and "\n" not in str(exc.value)


def test_delays():
    assert parse_delay("200us") == pytest.approx(200e-6)
    assert parse_delay("1ms") == pytest.approx(1e-3)
    assert parse_delay("0") == 0.0
    with pytest.raises(LabError, match="expected a delay"):
        parse_delay("200 MB")
    with pytest.raises(LabError, match="up to 1 s"):
        parse_delay("2s")


def test_names_addresses_and_rates_of_a_spec():
    spec = LabSpec(nodes=3, rate_bps=200e6, name="t1", slow={2: 100e6})
    assert spec.namespaces() == ("cslab-t1-sw", "cslab-t1-n0", "cslab-t1-n1", "cslab-t1-n2")
    assert [spec.address(k) for k in range(3)] == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]
    assert [spec.rate(k) for k in range(3)] == [200e6, 200e6, 100e6]
    assert LabSpec.from_json(spec.to_json(), "state") == spec


@pytest.mark.parametrize("kwargs, what", [
    ({"nodes": 0}, "--nodes"), ({"nodes": 65}, "--nodes"), ({"name": "Bad_Name"}, "--name"),
    ({"name": "lab\n"}, "--name"),  # "$" matched before the newline: it named namespaces cslab-lab\n-n0
    ({"slow": {3: 1e8}}, "--slow-node"), ({"slow": {1: 1.0}}, "--slow-bandwidth"), ({"rate_bps": 1e12}, "--bandwidth"),
])
def test_bad_specs_name_the_option(kwargs, what):
    args = {"nodes": 3, "rate_bps": 1e8, "name": "t1", **kwargs}
    with pytest.raises(LabError, match=what):
        LabSpec(**args)
    with pytest.raises(LabError, match="--node: expected a node from 0 to 2"):
        LabSpec(nodes=3, rate_bps=1e8).namespace(3)


def test_state_file_that_is_not_one_is_named(tmp_path):
    with pytest.raises(LabError, match=r"state\.json: not a lab state file"):
        LabSpec.from_json({"nodes": "x"}, str(tmp_path / "state.json"))


def test_shaping_tbf_alone_and_netem_over_tbf():
    # 100 Mbit/s = 12.5 MB/s: bucket 16 KiB (1 ms would be 12.5 kB), host queue 0.2 s, switch 50 ms
    host = shaping_commands(100e6, 0.0, "eth0", "ns", host=True)
    assert host == [["tc", "-n", "ns", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "tbf", "rate",
                     "100000000bit", "burst", str(MIN_BURST_BYTES), "limit", str(int(12.5e6 * HOST_QUEUE_S))]]
    port = shaping_commands(100e6, 200e-6, "p0", "sw", host=False)  # no delay on the switch side
    assert port[0][-1] == str(int(12.5e6 * SWITCH_QUEUE_S)) and len(port) == 1
    delayed = shaping_commands(1e9, 200e-6, "eth0", "ns", host=True)
    assert delayed[0] == ["tc", "-n", "ns", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "netem", "delay", "200us"]
    assert delayed[1][7:11] == ["parent", "1:1", "handle", "10:"]
    assert delayed[1][delayed[1].index("burst") + 1] == str(125000)  # 1 ms at 125 MB/s > 16 KiB


def test_missing_says_what_is_missing():
    everything = (1 << commands.CAP_NET_ADMIN) | (1 << commands.CAP_SYS_ADMIN)
    assert commands.missing(caps=everything, which=lambda tool: "/usr/sbin/" + tool) == []
    lacking = commands.missing(caps=1 << commands.CAP_SYS_ADMIN, which=lambda tool: None if tool == "tc" else tool)
    assert lacking == ["the `tc` command (iproute2)", "CAP_NET_ADMIN (run as root)"]


def test_effective_capabilities_from_proc_status(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t0000000000001000\n")
    assert commands.effective_capabilities(str(status)) == 1 << 12
    assert commands.effective_capabilities(str(tmp_path / "none")) is None


def test_teardown_refuses_names_outside_the_prefix():
    from commsim.lab.testbed import teardown

    with pytest.raises(ValueError, match="outside the lab's prefix"):
        teardown("my-")


@pytest.mark.parametrize("text, why", [("-5Mbit", "negative"), ("0Mbit", "zero"), ("nanMbit", "NaN"),
                                       ("infMbit", "infinite"), ("-5 Mbit/s", "negative")])
def test_a_bandwidth_of_the_wrong_sign_or_not_finite_says_so(text, why):
    # "-5Mbit" read "unknown unit 'Mbit'": tc's spelling was only recognised without a sign
    with pytest.raises(LabError) as exc:
        parse_bits(text, "--bandwidth")
    assert str(exc.value) == (f"--bandwidth: expected a positive, finite link rate like 400Mbit or 1Gbit, "
                              f"got {text!r} ({why})")


@pytest.mark.parametrize("text, why", [("-5us", "negative"), ("nan ms", "NaN"), ("inf", "infinite")])
def test_a_delay_of_the_wrong_sign_or_not_finite_says_so(text, why):
    with pytest.raises(LabError) as exc:
        parse_delay(text, "--latency")
    assert str(exc.value).endswith(f"got {text!r} ({why})")


@pytest.mark.parametrize("text, message", [
    ("[" * 100_000, "not JSON (nested too deeply)"),  # json's recursive decoder raised RecursionError
    ("{oops", "not JSON (Expecting property name"),
    ('{"format": "other"}', "format: expected"),
])
def test_a_damaged_state_file_is_one_line(tmp_path, monkeypatch, text, message):
    from commsim.lab import state

    monkeypatch.setenv(state.ENV, str(tmp_path))
    (tmp_path / "lab0.json").write_text(text)
    with pytest.raises(LabError) as err:
        state.read_state("lab0")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(str(tmp_path / "lab0.json"))


@pytest.mark.parametrize("name", ["../victim", "a/b", "", "Lab", "lab\n"])
def test_a_name_that_is_no_lab_name_never_becomes_a_state_path(tmp_path, monkeypatch, name):
    # status, link, run and down take --name without building a LabSpec: `commsim lab down
    # --name ../victim` removed <state dir>/../victim.json and said "nothing to remove", exit 0
    from click.testing import CliRunner

    from commsim.cli.main import main
    from commsim.lab import state

    monkeypatch.setenv(state.ENV, str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    monkeypatch.setattr(commands, "list_namespaces", lambda: [])  # no ip is run
    for op in (state.state_path, state.read_state, state.remove_state):
        with pytest.raises(LabError, match=r"^--name: expected 1-16 lower-case letters or digits"):
            op(name)
    for args in (["down"], ["status"], ["link", "--node", "0", "--cut"], ["run", "true"]):
        args = args[:-1] + ["--name", name, args[-1]] if args[0] == "run" else args + ["--name", name]
        res = CliRunner().invoke(main, ["lab"] + args)
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.count("\n") == 1 and "--name: expected 1-16 lower-case letters or digits" in res.stderr
    assert victim.exists()
    (tmp_path / "state" / "NOTALAB.json").write_text("{}")  # down --all passes over what no lab is named
    assert state.known_labs() == []
