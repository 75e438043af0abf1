"""QoS 1 deliveries/s to a persistent session's subscriber (clean session 0, QoS 1), the path
the durable table of deliveries in flight is written on (issue 42, q42): one raw-socket
publisher keeps WINDOW QoS 1 PUBLISHes unacknowledged, one raw-socket subscriber PUBACKs each
delivery at once. Figure: N / (last delivery - first publish). Binaries alternate, repetition by
repetition; a fresh broker and data directory each time.

    python3 persistent_delivery.py OUT.csv REPS N BINARY...
"""

import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The raw-packet encoders of the MQTT tests (one copy of them): crates/cli/tests/mqtt_paho.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "crates" / "cli" / "tests"))
from mqtt_paho import packet, utf8  # noqa: E402

WINDOW = 100
PAYLOAD = b"x" * 256


def packets(sock):
    buf = b""
    while True:
        while len(buf) >= 2:
            length, shift, i = 0, 0, 1
            while True:
                if i >= len(buf):
                    break
                length |= (buf[i] & 0x7F) << shift
                shift += 7
                i += 1
                if not buf[i - 1] & 0x80:
                    break
            if buf[i - 1] & 0x80 or len(buf) < i + length:
                break
            yield buf[0], buf[i:i + length]
            buf = buf[i + length:]
        chunk = sock.recv(1 << 20)
        if not chunk:
            return
        buf += chunk


def connect(port, client_id, clean):
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(packet(0x10, utf8("MQTT") + bytes([4, 0x02 if clean else 0x00, 0, 60]) + utf8(client_id)))
    stream = packets(sock)
    first, _ = next(stream)
    assert first == 0x20
    return sock, stream


def run(binary, n):
    with tempfile.TemporaryDirectory() as scratch:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        config = f"{scratch}/broker.toml"
        with open(config, "w") as f:
            f.write(f'[mqtt]\nlisten = "127.0.0.1:{port}"\n')
        args = [binary, "broker", "--listen", "127.0.0.1:0", "--udp", "off", "--admin", "127.0.0.1:0",
                "--data", f"{scratch}/data", "--config", config]
        broker = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            sub, sub_stream = connect(port, "persistent-sub", clean=False)
            sub.sendall(packet(0x82, b"\x00\x01" + utf8("pd/#") + b"\x01"))
            assert next(sub_stream)[0] == 0x90
            done = {}

            def receive():
                got = 0
                for first, body in sub_stream:
                    if first & 0xF0 == 0x30:
                        topic_len = int.from_bytes(body[:2], "big")
                        sub.sendall(packet(0x40, body[2 + topic_len:4 + topic_len]))
                        got += 1
                        if got == n:
                            done["at"] = time.monotonic()
                            return

            receiver = threading.Thread(target=receive)
            receiver.start()
            pub, pub_stream = connect(port, "pd-pub", clean=True)
            start = time.monotonic()
            sent = acked = 0
            while acked < n:
                burst = b""
                while sent < n and sent - acked < WINDOW:
                    sent += 1
                    burst += packet(0x32, utf8("pd/a") + (sent % 65535 + 1).to_bytes(2, "big") + PAYLOAD)
                if burst:
                    pub.sendall(burst)
                first, _ = next(pub_stream)
                if first == 0x40:
                    acked += 1
            receiver.join(120)
            return n / (done["at"] - start) if "at" in done else 0.0
        finally:
            broker.kill()
            broker.wait()


def main():
    out, reps, n, *binaries = sys.argv[1:]
    with open(out, "w") as f:
        f.write("binary,rep,delivered_msg_s\n")
        for rep in range(1, int(reps) + 1):
            for binary in binaries:
                rate = run(binary, int(n))
                print(f"{binary} rep {rep}: {rate:.0f} msg/s", flush=True)
                f.write(f"{binary},{rep},{rate:.1f}\n")


if __name__ == "__main__":
    main()
