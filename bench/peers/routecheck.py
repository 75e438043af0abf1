#!/usr/bin/env python3
"""Route checks for routecut_smoke.sh (loopback only).

routecheck.py routes MONITOR_PORT          one line per route of the node (/routez):
                                           remote name, dialled or accepted, TCP peer port, account
routecheck.py peers MONITOR_PORT           the remote server names the node has routes to, sorted
routecheck.py flow SUB_PORT PUB_PORT       core NATS message from the node at PUB_PORT to a subscriber
                                           at SUB_PORT: prints delivered/not delivered; exit 0 if delivered
"""
import json
import socket
import sys
import time
import urllib.request


def routez(mport):
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/routez", timeout=5) as r:
        return json.load(r).get("routes") or []


class Client:
    """A bare NATS client connection: enough protocol for SUB, PUB and PING."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self.send(b'CONNECT {"verbose":false,"pedantic":false,"name":"routecheck"}\r\nPING\r\n')
        self.wait_for(b"PONG", 5)

    def send(self, b):
        self.s.sendall(b)

    def wait_for(self, token, secs):
        """True once token was received (answering the server's PINGs), False after secs."""
        deadline = time.time() + secs
        while token not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                return False
            self.s.settimeout(left)
            try:
                data = self.s.recv(65536)
            except (socket.timeout, TimeoutError):
                return False
            if not data:
                return False
            self.buf += data
            if b"PING\r\n" in self.buf:
                self.buf = self.buf.replace(b"PING\r\n", b"")
                self.send(b"PONG\r\n")
        return True

    def close(self):
        self.s.close()


def flow(sub_port, pub_port):
    subject = f"routecheck.{time.time_ns()}"
    sub = Client(sub_port)
    sub.send(f"SUB {subject} 1\r\nPING\r\n".encode())
    sub.wait_for(b"PONG", 5)
    sub.buf = b""
    time.sleep(0.5)  # the subscription's interest crosses the routes
    pub = Client(pub_port)
    got = False
    for _ in range(10):  # 2 s
        pub.send(f"PUB {subject} 2\r\nhi\r\n".encode())
        if sub.wait_for(b"MSG " + subject.encode(), 0.2):
            got = True
            break
    pub.close()
    sub.close()
    return got


def main():
    cmd, port = sys.argv[1], int(sys.argv[2])
    if cmd == "routes":
        for r in sorted(routez(port), key=lambda r: (r.get("remote_name", ""), r.get("port", 0))):
            how = "dialled" if r.get("did_solicit") else "accepted"
            acc = r.get("account", "")
            print(f"  -> {r.get('remote_name')}: {how} {r.get('ip')}:{r.get('port')}"
                  f"{' account ' + acc if acc else ''} in_msgs={r.get('in_msgs')} out_msgs={r.get('out_msgs')}")
    elif cmd == "peers":
        print(" ".join(sorted({r.get("remote_name", "?") for r in routez(port)})) or "-")
    elif cmd == "flow":
        ok = flow(port, int(sys.argv[3]))
        print("delivered" if ok else "not delivered")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
