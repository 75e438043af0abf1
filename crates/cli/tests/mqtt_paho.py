"""Eclipse paho-mqtt clients against a tidings broker's MQTT listener, driven by
crates/cli/tests/mqtt_paho.rs. Each command checks what it can by itself and exits non-zero
saying why; commands that span a broker restart print what they received, for the Rust side.

    mqtt_paho.py COMMAND PORT VERSION [ARGS...]     VERSION is 3 (3.1.1) or 5
"""

import sys
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

TIMEOUT = 20.0


def fail(why):
    print(f"FAIL: {why}", file=sys.stderr, flush=True)
    sys.exit(1)


class Client:
    """A paho client with its messages and CONNACK collected, its network loop in a thread."""

    def __init__(self, port, version, client_id="", clean=True, expiry=None, will=None):
        self.version = version
        protocol = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
        kwargs = {"client_id": client_id, "protocol": protocol}
        if version != 5:
            kwargs["clean_session"] = clean
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, **kwargs)
        self.messages = []
        self.lock = threading.Condition()
        self.connack = None
        self.subacks = {}
        self.client.on_subscribe = self._subscribed
        self.client.on_message = self._message
        self.client.on_connect = self._connect
        if will is not None:
            topic, payload, qos, delay = will
            properties = None
            if version == 5 and delay:
                properties = Properties(PacketTypes.WILLMESSAGE)
                properties.WillDelayInterval = delay
            self.client.will_set(topic, payload, qos=qos, properties=properties)
        properties = None
        if version == 5:
            properties = Properties(PacketTypes.CONNECT)
            if expiry is not None:
                properties.SessionExpiryInterval = expiry
            self.client.connect("127.0.0.1", port, keepalive=30, clean_start=clean, properties=properties)
        else:
            self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        self.wait(lambda: self.connack is not None, "CONNACK")
        if self.connack[1] != 0:
            fail(f"CONNACK refused: {self.connack[1]}")

    def _connect(self, client, userdata, flags, reason, properties):
        with self.lock:
            self.connack = (flags.session_present, int(reason.value) if hasattr(reason, "value") else int(reason))
            self.lock.notify_all()

    def _message(self, client, userdata, message):
        with self.lock:
            self.messages.append(message)
            self.lock.notify_all()

    def wait(self, condition, what, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        with self.lock:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    fail(f"timed out waiting for {what}")
                self.lock.wait(left)

    def _subscribed(self, client, userdata, mid, reasons, properties):
        with self.lock:
            self.subacks[mid] = [int(r.value) if hasattr(r, "value") else int(r) for r in reasons]
            self.lock.notify_all()

    def subscribe(self, topic, qos):
        """Subscribes and waits for SUBACK; the granted QoS (or reason codes)."""
        result, mid = self.client.subscribe(topic, qos)
        if result != mqtt.MQTT_ERR_SUCCESS:
            fail(f"SUBSCRIBE {topic} not sent: {result}")
        self.wait(lambda: mid in self.subacks, f"SUBACK for {topic}")
        return self.subacks[mid]

    def publish(self, topic, payload, qos, retain=False):
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        info.wait_for_publish(TIMEOUT)
        if not info.is_published():
            fail(f"PUBLISH {topic} {payload!r} at QoS {qos} not acknowledged")

    def received(self, n):
        self.wait(lambda: len(self.messages) >= n, f"{n} messages (have {len(self.messages)})")
        return self.messages

    def disconnect(self):
        self.client.disconnect()
        self.client.loop_stop()


def qos(port, version):
    """QoS 1 and 2 both ways: each message once, in order, at the lower of the two QoS."""
    sub2 = Client(port, version)
    sub1 = Client(port, version)
    if sub2.subscribe("q/#", 2) != [2] or sub1.subscribe("q/#", 1) != [1]:
        fail("granted QoS differs from requested")
    pub = Client(port, version)
    sent = [(f"q/{q}", f"{q}-{i}", q) for i in range(5) for q in (1, 2)]
    for topic, payload, q in sent:
        pub.publish(topic, payload, q)
    for sub, top in ((sub2, 2), (sub1, 1)):
        got = [(m.topic, m.payload.decode(), m.qos) for m in sub.received(len(sent))]
        expected = [(t, p, min(q, top)) for t, p, q in sent]
        if got != expected:
            fail(f"subscriber at QoS {top} got {got}, expected {expected}")
    time.sleep(0.5)
    if len(sub2.messages) != len(sent) or len(sub1.messages) != len(sent):
        fail("a message came twice")
    for c in (sub2, sub1, pub):
        c.disconnect()
    print("ok")


def subscribe(port, version, client_id, topic, q):
    """Opens a persistent session subscribed to TOPIC and leaves it (a normal DISCONNECT)."""
    c = Client(port, version, client_id, clean=False, expiry=3600)
    c.subscribe(topic, int(q))
    c.disconnect()
    print(f"session_present={c.connack[0]}")


def publish(port, version, topic, q, n, prefix="m"):
    """Publishes N messages, each acknowledged before the next."""
    c = Client(port, version)
    for i in range(int(n)):
        c.publish(topic, f"{prefix}{i}", int(q))
    c.disconnect()
    print("published")


def receive(port, version, client_id, n):
    """Resumes the persistent session, prints session_present and the N messages it gets."""
    c = Client(port, version, client_id, clean=False, expiry=3600)
    messages = c.received(int(n))
    time.sleep(0.5)
    print(f"session_present={c.connack[0]}")
    for m in c.messages:
        print(f"{m.topic} {m.payload.decode()} qos={m.qos}")
    c.disconnect()


def hold_will(port, version, topic, delay):
    """Connects with a will on TOPIC and waits to be killed."""
    # A will waits for its delay only while the session lasts (MQTT-3.1.3-9): give it one.
    expiry = 60 if int(delay) else None
    c = Client(port, version, expiry=expiry, will=(topic, b"gone", 1, int(delay)))
    print("connected", flush=True)
    time.sleep(60)
    c.disconnect()


def leave_with_will(port, version, topic):
    """Connects with a will on TOPIC and disconnects normally: the will is not published."""
    c = Client(port, version, will=(topic, b"gone", 1, 0))
    c.disconnect()
    print("left")


def watch(port, version, topic, n, seconds):
    """Subscribes to TOPIC, says so, and prints what arrives within SECONDS (at most N)."""
    c = Client(port, version)
    c.subscribe(topic, 1)
    print("subscribed", flush=True)
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline and len(c.messages) < int(n):
        time.sleep(0.05)
    for m in c.messages:
        print(f"{m.topic} {m.payload.decode()}", flush=True)
    c.disconnect()


def share(port, version):
    """Two members of $share/g/s/#: each message reaches exactly one of them, both get some."""
    a = Client(port, version)
    b = Client(port, version)
    a.subscribe("$share/g/s/#", 0)
    b.subscribe("$share/g/s/#", 0)
    pub = Client(port, version)
    sent = [f"s{i}" for i in range(20)]
    for payload in sent:
        pub.publish("s/x", payload, 0)
    a.wait(lambda: len(a.messages) + len(b.messages) >= len(sent), "every shared message", TIMEOUT)
    time.sleep(0.5)
    got = sorted([m.payload.decode() for m in a.messages + b.messages], key=lambda p: int(p[1:]))
    if got != sent:
        fail(f"the group got {got}")
    if not a.messages or not b.messages:
        fail(f"one member got everything: {len(a.messages)} and {len(b.messages)}")
    for c in (a, b, pub):
        c.disconnect()
    print("ok")


if __name__ == "__main__":
    command, port, version, *rest = sys.argv[1:]
    globals()[command.replace("-", "_")](int(port), int(version), *rest)
