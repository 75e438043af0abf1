#!/usr/bin/env python3
"""Broker memory per idle client connection: starts `tidings broker` on loopback ports the OS
picks, reads its resident memory (`process_resident_memory_bytes` on /metrics), opens N TCP
connections that send nothing, and reads it again.

    cargo build --release -p tidings-cli
    python3 bench/idle-connections.py target/release/tidings 2000
"""
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def rss(admin):
    text = urllib.request.urlopen("http://%s/metrics" % admin).read().decode()
    for line in text.splitlines():
        if line.startswith("process_resident_memory_bytes "):
            return float(line.split()[1])
    raise SystemExit("no process_resident_memory_bytes in /metrics")


def main():
    binary, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    with tempfile.TemporaryDirectory() as data:
        broker = subprocess.Popen(
            [binary, "broker", "--listen", "127.0.0.1:0", "--udp", "off", "--admin", "127.0.0.1:0", "--data", data],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            ready = json.loads(broker.stdout.readline())
            host, port = ready["tcp"].rsplit(":", 1)
            time.sleep(0.5)
            before = rss(ready["admin"])
            sockets = [socket.create_connection((host, int(port))) for _ in range(count)]
            time.sleep(1.0)
            after = rss(ready["admin"])
            print("%d idle connections: RSS %.1f MB -> %.1f MB, %.1f KB per connection"
                  % (len(sockets), before / 1e6, after / 1e6, (after - before) / count / 1024))
        finally:
            broker.terminate()
            broker.wait()


if __name__ == "__main__":
    main()
