"""A TCP stream between two lab nodes, to measure a shaped link without torch.

    python tcp_stream.py recv ADDRESS PORT BYTES   # prints the payload rate in bit/s
    python tcp_stream.py send ADDRESS PORT BYTES
"""

import socket
import sys
import time


def main(mode, addr, port, nbytes):
    port, nbytes = int(port), int(nbytes)
    if mode == "recv":
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
            if t0 is None:  # from the first byte: the connection's set-up is not the link's rate
                t0 = time.perf_counter()
            got += len(chunk)
        print(got * 8 / (time.perf_counter() - t0), flush=True)
    else:
        conn = socket.create_connection((addr, port), timeout=30)
        buf = b"\0" * (1 << 20)
        sent = 0
        while sent < nbytes:
            conn.sendall(buf)
            sent += len(buf)
        conn.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
