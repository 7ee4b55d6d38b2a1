"""The lab: a multi-node cluster on one machine, in network namespaces with shaped links.

``commsim lab up --nodes 4 --bandwidth 200Mbit --latency 200us`` builds it, ``commsim lab run
--node K -- CMD`` runs a command on a node, ``commsim lab down`` removes it. In Python::

    from commsim.lab import Lab, LabSpec, parse_bits
    with Lab(LabSpec(nodes=4, rate_bps=parse_bits("200Mbit"), delay_s=200e-6, name="t1")) as lab:
        argv = lab.command(0, ["python", "-c", "print('hello from node 0')"])

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's ``ip`` and ``tc``; elsewhere
:func:`commsim.lab.commands.preflight` says in one line what is missing. No torch here: the
ranks that run inside the lab are validate/multinode.py's.
"""

from commsim.lab.commands import CommandError, LabUnavailable, missing, preflight  # noqa: F401
from commsim.lab.spec import LabError, LabSpec, describe_rate, parse_bits, parse_delay  # noqa: F401
from commsim.lab.testbed import Lab, leftovers, signals_raise, teardown  # noqa: F401

__all__ = ["CommandError", "Lab", "LabError", "LabSpec", "LabUnavailable", "describe_rate", "leftovers", "missing",
           "parse_bits", "parse_delay", "preflight", "signals_raise", "teardown"]
