"""Resident memory per idle MQTT connection, then after two rounds of pings (issue 42, fifth pass).

Usage: start a release broker with `[mqtt] listen = "127.0.0.1:PORT"` and
`[limits] max_connections_per_address = 50000`, then
    python3 idle_pings.py BROKER_PID PORT 9000
It opens 500 warm-up connections, then N idle 3.1.1 connections (keep alive 600 s), and prints
the broker's anonymous memory growth per connection (/proc/PID/smaps_rollup) after 3 s, after
18 s, and after each of two rounds of PINGREQ on every connection.
"""
import socket
import sys
import time

pid, port, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def anon():
    for line in open(f"/proc/{pid}/smaps_rollup"):
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no Anonymous line")


def connect(i):
    client = f"idle-{i}".encode()
    body = b"\x00\x04MQTT\x04\x02\x02\x58" + len(client).to_bytes(2, "big") + client
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"\x10" + bytes([len(body)]) + body)
    s.recv(4)
    return s


socks = [connect(i) for i in range(500)]
time.sleep(2)
base = anon()
socks += [connect(i) for i in range(500, 500 + n)]
for label, wait, ping in [("after 3 s", 3, False), ("after 18 s", 15, False), ("after pings", 3, True), ("after pings 2", 3, True)]:
    if ping:
        for s in socks:
            s.sendall(b"\xc0\x00")
        for s in socks:
            s.recv(2)
    time.sleep(wait)
    print(f"{label}: {(anon() - base) / n:.0f} B per connection")
