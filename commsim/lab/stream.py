"""One TCP stream between two lab nodes: a shaped link's rate, measured without torch.

    python -m commsim.lab.stream recv ADDRESS PORT BYTES   # prints the payload rate, bit/s
    python -m commsim.lab.stream send ADDRESS PORT BYTES

:func:`stream_rate` runs both ends in their nodes. The rate is the receiver's: payload bytes
from the first byte received to the last (the connection's set-up is not the link's rate).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

DEFAULT_PORT = 5201


def receive(addr: str, port: int, nbytes: int) -> float:
    """Accept one connection on addr:port, read `nbytes`; the payload rate in bit/s."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, port))
    srv.listen(1)
    print("listening", flush=True)
    conn, _ = srv.accept()
    got, t0 = 0, None
    while got < nbytes:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        if t0 is None:
            t0 = time.perf_counter()
        got += len(chunk)
    return got * 8 / (time.perf_counter() - t0)


def send(addr: str, port: int, nbytes: int) -> None:
    conn = socket.create_connection((addr, port), timeout=30)
    buf = b"\0" * (1 << 20)
    sent = 0
    while sent < nbytes:
        conn.sendall(buf)
        sent += len(buf)
    conn.close()


def stream_rate(lab, src: int, dst: int, nbytes: int = 8 << 20, port: int = DEFAULT_PORT) -> float:
    """Payload bit/s of one TCP stream from lab node `src` to node `dst`."""
    def argv(mode):
        return lab.command(src if mode == "send" else dst,
                           [sys.executable, "-m", "commsim.lab.stream", mode, lab.address(dst), str(port), str(nbytes)])

    recv = subprocess.Popen(argv("recv"), stdout=subprocess.PIPE, text=True)
    try:
        if recv.stdout.readline().strip() != "listening":
            raise RuntimeError(f"the receiver on node {dst} did not start")
        subprocess.run(argv("send"), check=True, timeout=120)
        return float(recv.stdout.readline())
    finally:
        try:
            recv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            recv.kill()
            recv.wait()


def main(argv=None) -> int:
    mode, addr, port, nbytes = (argv or sys.argv[1:])
    if mode == "recv":
        print(receive(addr, int(port), int(nbytes)), flush=True)
    else:
        send(addr, int(port), int(nbytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
