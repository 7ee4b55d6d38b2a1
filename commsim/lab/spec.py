"""What a lab is: N nodes, the rate and delay of each node's link, an optional slower link.

A lab is named (``--name``, default ``lab``); everything it creates is named after it with the
prefix ``cslab-<name>-``: the switch namespace ``cslab-<name>-sw`` and one namespace per node,
``cslab-<name>-n<k>``. The prefix is how ``commsim lab down`` finds what a crashed run left.

Addresses: 10.77.0.<k+1>/24 for node k, 10.77.0.254 on the switch's bridge. They exist only
inside the lab's own namespaces (the bridge lives in the switch namespace, not in the host's),
so two labs, or a lab and the host, never see each other's addresses.

Rates are bits per second, as ``tc`` takes them: ``400Mbit`` (tc's own spelling), ``400 Mbit/s``,
``400Mbps``; a plain number is bytes per second (the project's convention, commsim.units).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from commsim.errors import InputError
from commsim.units import NotFiniteError, SignError, UnitError, parse_rate, parse_time

PREFIX = "cslab-"
SUBNET = "10.77.0"
PREFIX_LEN = 24
SWITCH_ADDRESS = f"{SUBNET}.254"
NODE_IFACE = "eth0"  # the node's side of its veth pair (inside the node's namespace)
BRIDGE = "br0"  # inside the switch namespace
# jumbo frames, as on a cluster fabric: a sixth of the packets per byte of 1500-byte frames
# (less CPU per byte on a small machine) and 99% of the shaped rate carries payload
MTU = 9000
MAX_NODES = 64
# 10 Gbit/s: beyond that the CPU, not the shaped link, sets the pace on any machine this runs on
MAX_RATE_BPS = 10e9
MIN_RATE_BPS = 1e6
MAX_LATENCY_S = 1.0
# \Z, not $: "$" also matches before a trailing newline, which let --name 'lab\n' through into the
# namespaces' and the state file's names
NAME_RE = re.compile(r"^[a-z0-9]{1,16}\Z")
# The number part takes a sign, NaN and infinities too, so that "-5Mbit" is refused for its
# sign (it read "unknown unit 'Mbit'", the tc spelling going unrecognised).
_TC_BITS = re.compile(r"^\s*([+-]?(?:[0-9]+(?:\.[0-9]+)?|(?i:nan|inf(?:inity)?)))\s*([kKMGT]?)bit\s*$")


class LabError(InputError):
    """Bad lab input (an option or the state file): one line, exit code 2."""


def check_name(name: object) -> str:
    """A lab's name (``--name``) as :data:`NAME_RE` allows it, else LabError naming --name. Every
    name that becomes a namespace's or a state file's name passes here."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise LabError("--name", None, f"expected 1-16 lower-case letters or digits, got {name!r}")
    return name


def parse_bits(text: str, source: str = "--bandwidth") -> float:
    """Bits per second from ``400Mbit`` (tc's spelling), ``400 Mbit/s``, ``400Mbps`` or a plain
    number of bytes per second; LabError naming `source` otherwise."""
    value = text
    m = _TC_BITS.match(str(text))
    if m:  # tc's "Mbit" is SI megabits per second, which commsim.units spells "Mbit/s"
        value = f"{m.group(1)} {m.group(2).replace('K', 'k')}bit/s"
    try:
        bits = parse_rate(value) * 8.0
    except (SignError, NotFiniteError) as exc:
        raise LabError(source, None, f"expected a positive, finite link rate like 400Mbit or 1Gbit, got {text!r} "
                                     f"({exc.reason})") from None
    except UnitError as exc:
        raise LabError(source, None, f"expected a link rate like 400Mbit or 1Gbit, got {text!r} ({exc})") from None
    if not MIN_RATE_BPS <= bits <= MAX_RATE_BPS:
        raise LabError(source, None, f"expected a rate from 1Mbit to 10Gbit, got {text!r} ({bits / 1e6:g} Mbit/s)")
    return bits


def parse_delay(text: str, source: str = "--latency") -> float:
    """Seconds of one-way delay from ``200us``, ``1ms``, ``0``; LabError naming `source` otherwise."""
    try:
        seconds = parse_time(str(text), allow_zero=True)
    except (SignError, NotFiniteError) as exc:
        raise LabError(source, None, f"expected a non-negative, finite delay like 200us or 1ms, got {text!r} "
                                     f"({exc.reason})") from None
    except UnitError as exc:
        raise LabError(source, None, f"expected a delay like 200us or 1ms, got {text!r} ({exc})") from None
    if seconds > MAX_LATENCY_S:
        raise LabError(source, None, f"expected a delay up to 1 s, got {text!r}")
    return seconds


@dataclass(frozen=True)
class LabSpec:
    """A lab: `nodes` namespaces on one switch; every node's link runs at `rate_bps` (each
    direction) with `delay_s` one-way delay, except the nodes in `slow` (node -> its rate)."""

    nodes: int
    rate_bps: float
    delay_s: float = 0.0
    name: str = "lab"
    slow: Dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not (isinstance(self.nodes, int) and 1 <= self.nodes <= MAX_NODES):
            raise LabError("--nodes", None, f"expected 1 to {MAX_NODES} nodes, got {self.nodes!r}")
        if not MIN_RATE_BPS <= self.rate_bps <= MAX_RATE_BPS:
            raise LabError("--bandwidth", None, f"expected 1e6 to 1e10 bit/s, got {self.rate_bps!r}")
        if not 0 <= self.delay_s <= MAX_LATENCY_S:
            raise LabError("--latency", None, f"expected 0 to 1 s, got {self.delay_s!r}")
        for node, rate in self.slow.items():
            if not (isinstance(node, int) and 0 <= node < self.nodes):
                raise LabError("--slow-node", None, f"expected a node from 0 to {self.nodes - 1}, got {node!r}")
            if not MIN_RATE_BPS <= rate <= MAX_RATE_BPS:
                raise LabError("--slow-bandwidth", None, f"expected 1e6 to 1e10 bit/s, got {rate!r}")

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.name}-"

    @property
    def switch(self) -> str:
        """The switch namespace (the bridge and the switch side of every node's veth)."""
        return f"{self.prefix}sw"

    def namespace(self, node: int) -> str:
        """Node `node`'s namespace, also its host name inside the lab."""
        self.check_node(node)
        return f"{self.prefix}n{node}"

    def address(self, node: int) -> str:
        """Node `node`'s address (on its eth0, inside its namespace)."""
        self.check_node(node)
        return f"{SUBNET}.{node + 1}"

    def port(self, node: int) -> str:
        """The switch-side interface of node `node`'s veth pair (inside the switch namespace)."""
        self.check_node(node)
        return f"p{node}"

    def rate(self, node: int) -> float:
        """Node `node`'s link rate in bit/s (its slow rate, if it has one)."""
        return self.slow.get(node, self.rate_bps)

    def namespaces(self) -> Tuple[str, ...]:
        return (self.switch,) + tuple(self.namespace(k) for k in range(self.nodes))

    def check_node(self, node: int) -> None:
        if not (isinstance(node, int) and 0 <= node < self.nodes):
            raise LabError("--node", None, f"expected a node from 0 to {self.nodes - 1}, got {node!r}")

    def to_json(self) -> dict:
        return {"name": self.name, "nodes": self.nodes, "rate_bps": self.rate_bps, "delay_s": self.delay_s,
                "slow": {str(k): v for k, v in sorted(self.slow.items())}}

    @classmethod
    def from_json(cls, doc: dict, source: str) -> "LabSpec":
        try:
            return cls(nodes=int(doc["nodes"]), rate_bps=float(doc["rate_bps"]), delay_s=float(doc["delay_s"]),
                       name=str(doc["name"]), slow={int(k): float(v) for k, v in dict(doc.get("slow", {})).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise LabError(source, None, f"not a lab state file ({type(exc).__name__}: {exc})") from None


def tc_rate(bits: float) -> str:
    """A rate as tc reads it (whole bits per second)."""
    return f"{int(round(bits))}bit"


def describe_rate(bits: Optional[float]) -> str:
    """400 Mbit/s, 1.5 Gbit/s: for messages."""
    if bits is None:
        return "-"
    if bits >= 1e9:
        return f"{bits / 1e9:g} Gbit/s"
    return f"{bits / 1e6:g} Mbit/s"
