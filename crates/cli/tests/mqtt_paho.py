"""Eclipse paho-mqtt clients against a tidings broker's MQTT listener, driven by
crates/cli/tests/mqtt_paho.rs. Each command checks what it can by itself and exits non-zero
saying why; commands that span a broker restart print what they received, for the Rust side.

    mqtt_paho.py COMMAND PORT VERSION [ARGS...]     VERSION is 3 (3.1.1) or 5

A COMMAND prefixed with `ws-` (`ws-qos`, `ws-receive`, ...) runs the same command over MQTT over
WebSocket (paho's transport="websockets", path /mqtt): PORT is then the `[mqtt] websocket` one.
"""

import sys
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

TIMEOUT = 20.0
# "tcp", or "websockets" for a `ws-` command.
TRANSPORT = "tcp"


def fail(why):
    print(f"FAIL: {why}", file=sys.stderr, flush=True)
    sys.exit(1)


class Client:
    """A paho client with its messages and CONNACK collected, its network loop in a thread."""

    def __init__(self, port, version, client_id="", clean=True, expiry=None, will=None, inflight=None):
        self.version = version
        protocol = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
        kwargs = {"client_id": client_id, "protocol": protocol}
        if version != 5:
            kwargs["clean_session"] = clean
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, transport=TRANSPORT, **kwargs)
        if TRANSPORT == "websockets":
            self.client.ws_set_options(path="/mqtt")
        if inflight is not None:
            self.client.max_inflight_messages_set(inflight)
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
        # paho hands a QoS 2 message to the application at PUBREL, not at PUBLISH, so a QoS 1
        # PUBLISH the broker sent after it can come first: the order is checked per topic (each
        # topic one QoS), and every message exactly once.
        for topic in ("q/1", "q/2"):
            mine = [m for m in got if m[0] == topic]
            if mine != [m for m in expected if m[0] == topic]:
                fail(f"subscriber at QoS {top} got {got}, expected {expected}")
        if sorted(got) != sorted(expected):
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


def receive(port, version, client_id, n, linger="0.5"):
    """Resumes the persistent session, prints session_present and the N messages it gets (and
    any more within LINGER seconds)."""
    c = Client(port, version, client_id, clean=False, expiry=3600)
    messages = c.received(int(n))
    time.sleep(float(linger))
    print(f"session_present={c.connack[0]}")
    for m in c.messages:
        print(f"{m.topic} {m.payload.decode()} qos={m.qos}")
    c.disconnect()


def hold_will(port, version, topic, delay, client_id=""):
    """Connects (as CLIENT_ID, if given) with a will on TOPIC and waits to be killed."""
    # A will waits for its delay only while the session lasts (MQTT-3.1.3-9): give it one.
    expiry = 60 if int(delay) else None
    c = Client(port, version, client_id, expiry=expiry, will=(topic, b"gone", 1, int(delay)))
    print("connected", flush=True)
    time.sleep(60)
    c.disconnect()


def come_back(port, version, client_id):
    """Connects to CLIENT_ID's session again (clean start 0, no will) and leaves normally: a
    will of its previous connection still waiting for its delay is not sent."""
    c = Client(port, version, client_id, clean=False, expiry=60)
    c.disconnect()
    print("back")


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
    # Polled: a's condition variable is not told of b's messages.
    until(lambda: len(a.messages) + len(b.messages) >= len(sent))
    time.sleep(0.5)
    got = sorted([m.payload.decode() for m in a.messages + b.messages], key=lambda p: int(p[1:]))
    if got != sent:
        fail(f"the group got {got}")
    if not a.messages or not b.messages:
        fail(f"one member got everything: {len(a.messages)} and {len(b.messages)}")
    for c in (a, b, pub):
        c.disconnect()
    print("ok")


def until(condition):
    """Polls `condition` for up to TIMEOUT (the caller then checks what came)."""
    deadline = time.monotonic() + TIMEOUT
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def share_qos(port, version):
    """Three members of $share/w/jobs/# at QoS 1 (one at 2) and a QoS 1 and 2 publisher: each
    message reaches exactly one member, at the lower QoS, none flagged DUP, and each member
    gets some."""
    members = [Client(port, version) for _ in range(3)]
    for c, q in zip(members, (1, 1, 2)):
        if c.subscribe("$share/w/jobs/#", q) != [q]:
            fail(f"SUBACK for $share/w/jobs/# at QoS {q}: {c.subacks}")
    pub = Client(port, version, inflight=100)
    sent = [f"j{i}" for i in range(300)]
    infos = [pub.client.publish("jobs/x", p, qos=1 + i % 2) for i, p in enumerate(sent)]
    for info in infos:
        info.wait_for_publish(TIMEOUT)
    until(lambda: sum(len(c.messages) for c in members) >= len(sent))
    time.sleep(0.5)
    got = sorted([m.payload.decode() for c in members for m in c.messages], key=lambda p: int(p[1:]))
    if got != sent:
        fail(f"the group got {len(got)} messages, {len(set(got))} distinct, of {len(sent)}")
    for i, c in enumerate(members):
        if not c.messages:
            fail(f"member {i} got nothing")
        if any(m.dup for m in c.messages):
            fail(f"member {i} got a DUP with no member gone")
        want = (1, 1, 2)[i]
        wrong = [(m.payload, m.qos) for m in c.messages if m.qos != min(want, 1 + int(m.payload[1:]) % 2)]
        if wrong:
            fail(f"member {i} at QoS {want} got {wrong[:3]}")
    for c in members + [pub]:
        c.disconnect()
    print("ok")


def share_member(port, version, delay):
    """A member of $share/k/kill/# at QoS 1: prints `subscribed`, then `PAYLOAD DUP` for each
    message as it comes (taking DELAY seconds over each), until 5 s without one."""
    c = Client(port, version)

    def slow(client, userdata, message):
        print(f"{message.payload.decode()} {int(message.dup)}", flush=True)
        time.sleep(float(delay))
        c._message(client, userdata, message)

    c.client.on_message = slow
    if c.subscribe("$share/k/kill/#", 1) != [1]:
        fail(f"SUBACK {c.subacks}")
    print("subscribed", flush=True)
    deadline = time.monotonic() + 90
    seen, quiet = 0, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if len(c.messages) != seen:
            seen, quiet = len(c.messages), time.monotonic()
        elif seen and time.monotonic() - quiet > 5:
            break
    c.disconnect()


def publish_many(port, version, topic, n):
    """Publishes N messages `m0`... at QoS 1, up to 100 in flight, each acknowledged."""
    c = Client(port, version, inflight=100)
    infos = [c.client.publish(topic, f"m{i}", qos=1) for i in range(int(n))]
    for info in infos:
        info.wait_for_publish(TIMEOUT)
        if not info.is_published():
            fail("a publish was not acknowledged")
    c.disconnect()
    print("published")


def overlap(port, version):
    """Overlapping subscriptions of one session (o/# QoS 0 id 1, o/+ QoS 1 id 2, o/x QoS 2 id 3)
    get one copy of each message, at the highest QoS they grant it, carrying every identifier
    (5.0); a shared subscription over the same topic gets a copy of its own."""
    sub = Client(port, version)
    for topic, q, ident in [("o/#", 0, 1), ("o/+", 1, 2), ("o/x", 2, 3), ("$share/g/o/x", 0, 4)]:
        props = None
        if version == 5:
            props = Properties(PacketTypes.SUBSCRIBE)
            props.SubscriptionIdentifier = ident
        granted = subscribe_with(sub, topic, q, props) if version == 5 else sub.subscribe(topic, q)
        if granted != [q]:
            fail(f"{topic} not granted QoS {q}: {granted}")
    pub = Client(port, version)
    for q in (0, 1, 2):
        pub.publish("o/x", f"q{q}", q)
    sub.received(6)
    time.sleep(1.0)
    copies = {}
    for m in sub.messages:
        ids = sorted(m.properties.SubscriptionIdentifier) if version == 5 else []
        copies.setdefault(m.payload.decode(), []).append((m.qos, ids))
    for q in (0, 1, 2):
        got = sorted(copies.get(f"q{q}", []))
        shared = (0, [4] if version == 5 else [])
        whole = (q, [1, 2, 3] if version == 5 else [])
        if got != sorted([shared, whole]):
            fail(f"a QoS {q} publish came as {got}, expected one copy {whole} and the shared one {shared}")
    sub.disconnect()
    pub.disconnect()
    print("ok")


def subscribe_with(c, topic, qos=0, properties=None, **options):
    """SUBSCRIBE with 5.0 options and properties; the SUBACK's reason codes."""
    from paho.mqtt.subscribeoptions import SubscribeOptions

    result, mid = c.client.subscribe((topic, SubscribeOptions(qos=qos, **options)), properties=properties)
    if result != mqtt.MQTT_ERR_SUCCESS:
        fail(f"SUBSCRIBE {topic} not sent: {result}")
    c.wait(lambda: mid in c.subacks, f"SUBACK for {topic}")
    return c.subacks[mid]


def publish_with(c, topic, payload, qos=0, retain=False, **props):
    properties = Properties(PacketTypes.PUBLISH)
    for name, value in props.items():
        setattr(properties, name, value)
    info = c.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
    info.wait_for_publish(TIMEOUT)


def only(c, what, expected, seconds=1.0):
    """Waits SECONDS, then checks the payloads C got are exactly EXPECTED, and clears them."""
    time.sleep(seconds)
    with c.lock:
        got = [m.payload.decode() for m in c.messages]
        if got != expected:
            fail(f"{what}: got {got}, expected {expected}")
        messages = list(c.messages)
        c.messages.clear()
    return messages


def v5_features(port, version):
    """5.0 properties and options: user properties, response topic and correlation data,
    content type, payload format, message expiry, topic aliases, subscription identifiers,
    no-local, retain-as-published, retain handling, and a tidings selector (tidings-where)."""
    sub = Client(port, 5)
    pub = Client(port, 5)
    ids = Properties(PacketTypes.SUBSCRIBE)
    ids.SubscriptionIdentifier = 7
    if subscribe_with(sub, "v/#", 1, ids) != [1]:
        fail("v/# not granted")
    # Everything a PUBLISH carries comes out as it went in; the expiry left is at most the
    # interval given.
    publish_with(pub, "v/props", b"p", 1, UserProperty=[("room", "kitchen"), ("k", "v"), ("k", "w")],
                 ResponseTopic="v/reply/1", CorrelationData=b"\x00\x01\xff", ContentType="text/plain",
                 PayloadFormatIndicator=1, MessageExpiryInterval=60)
    m = sub.received(1)[0]
    p = m.properties
    checks = {
        "user properties": (p.UserProperty, [("room", "kitchen"), ("k", "v"), ("k", "w")]),
        "response topic": (p.ResponseTopic, "v/reply/1"),
        "correlation data": (p.CorrelationData, b"\x00\x01\xff"),
        "content type": (p.ContentType, "text/plain"),
        "payload format": (p.PayloadFormatIndicator, 1),
        "subscription identifier": (p.SubscriptionIdentifier, [7]),
    }
    for what, (got, expected) in checks.items():
        if got != expected:
            fail(f"{what}: got {got!r}, expected {expected!r}")
    if not 0 < p.MessageExpiryInterval <= 60:
        fail(f"expiry left {p.MessageExpiryInterval}")
    sub.messages.clear()
    # A topic alias set with a topic, then used alone.
    publish_with(pub, "v/alias", b"a1", 0, TopicAlias=3)
    publish_with(pub, "", b"a2", 0, TopicAlias=3)
    got = [(m.topic, m.payload.decode()) for m in sub.received(2)]
    if got != [("v/alias", "a1"), ("v/alias", "a2")]:
        fail(f"topic alias: got {got}")
    sub.messages.clear()
    # A selector over user properties; a bad one fails its filter alone, saying why.
    where = Properties(PacketTypes.SUBSCRIBE)
    where.UserProperty = ("tidings-where", "room = 'kitchen'")
    sel = Client(port, 5)
    if subscribe_with(sel, "w/#", 0, where) != [0]:
        fail("w/# with a selector not granted")
    bad = Properties(PacketTypes.SUBSCRIBE)
    bad.UserProperty = ("tidings-where", "room = ")
    if subscribe_with(sel, "x/#", 0, bad) != [0x83]:
        fail("a bad selector was not refused with 0x83")
    for room in ("hall", "kitchen", "attic"):
        publish_with(pub, "w/t", room.encode(), 0, UserProperty=[("room", room)])
    only(sel, "selector", ["kitchen"])
    # No-local: the session's own messages stay away, others' come.
    if subscribe_with(sub, "n/#", 0, None, noLocal=True) != [0]:
        fail("n/# not granted")
    publish_with(sub, "n/mine", b"mine")
    publish_with(pub, "n/theirs", b"theirs")
    only(sub, "no-local", ["theirs"])
    # Retain handling 2: no retained value at subscribe; retain-as-published keeps live flags.
    publish_with(pub, "r/kept", b"kept", 0, retain=True)
    time.sleep(0.3)
    rap = Client(port, 5)
    subscribe_with(rap, "r/#", 0, None, retainHandling=2, retainAsPublished=True)
    plain = Client(port, 5)
    subscribe_with(plain, "r/#", 0)
    only(plain, "retain handling 0", ["kept"], 0.5)
    publish_with(pub, "r/live", b"live", 0, retain=True)
    flags = [m.retain for m in only(rap, "retain handling 2", ["live"])]
    if flags != [True]:
        fail(f"retain-as-published: RETAIN flags {flags}")
    if [m.retain for m in only(plain, "live after retained", ["live"], 0.2)] != [False]:
        fail("a live message was flagged retained without retain-as-published")
    # Retain handling 1: a second SUBSCRIBE of the same filter sends no retained value again.
    subscribe_with(plain, "r/#", 0, None, retainHandling=1)
    only(plain, "retain handling 1", [], 0.5)
    # Message expiry: a retained value whose interval passed is not sent.
    publish_with(pub, "e/short", b"short", 0, retain=True, MessageExpiryInterval=1)
    publish_with(pub, "e/long", b"long", 0, retain=True, MessageExpiryInterval=600)
    time.sleep(2.2)
    late = Client(port, 5)
    subscribe_with(late, "e/#", 0)
    only(late, "expired retained value", ["long"])
    for c in (sub, pub, sel, rap, plain, late):
        c.disconnect()
    print("ok")


def clean_discards(port, version):
    """A clean start discards the old session: what its durable subscriptions held while it was
    away never reaches the new one, whatever the new one subscribes (the paho suite's
    test_unsubscribe got such a message once its durable subscription was deleted)."""
    old = Client(port, version, client_id="clean-b", clean=False, expiry=600)
    old.subscribe("cl/#", 2)
    old.disconnect()
    pub = Client(port, version)
    pub.publish("cl/x", b"held", 1)
    new = Client(port, version, client_id="clean-b", clean=True)
    if new.connack[0]:
        fail("session present after a clean start")
    new.subscribe("cl/y", 2)
    new.subscribe("other", 2)
    only(new, "after a clean start", [], 1.5)
    pub.publish("cl/y", b"live", 1)
    only(new, "live after a clean start", ["live"], 1.0)
    for c in (pub, new):
        c.disconnect()
    print("ok")


def retained_qos(port, version):
    """QoS 1 and 2 retained publishes are kept like QoS 0 ones: a new subscription gets each at
    the lower of its QoS and the subscription's, flagged retained; an empty one clears; in 5.0 a
    retain-as-published subscription sees the RETAIN flag on a QoS 1 live copy."""
    pub = Client(port, version)
    for q in (0, 1, 2):
        pub.publish(f"rq/{q}", f"kept {q}".encode(), q, retain=True)
    time.sleep(0.3)
    for top in (2, 1):
        sub = Client(port, version)
        sub.subscribe("rq/+", top)
        got = sorted((m.topic, m.payload.decode(), m.qos, bool(m.retain)) for m in sub.received(3))
        expected = [(f"rq/{q}", f"kept {q}", min(q, top), True) for q in (0, 1, 2)]
        if got != expected:
            fail(f"retained values at QoS {top}: got {got}, expected {expected}")
        sub.disconnect()
    if version == 5:
        rap = Client(port, 5)
        subscribe_with(rap, "rq/live", 1, None, retainAsPublished=True)
        publish_with(pub, "rq/live", b"live", 1, retain=True)
        flags = [m.retain for m in only(rap, "retain as published at QoS 1", ["live"])]
        if flags != [True]:
            fail(f"retain-as-published at QoS 1: RETAIN flags {flags}")
        rap.disconnect()
        pub.publish("rq/live", b"", 1, retain=True)
    pub.publish("rq/1", b"", 1, retain=True)
    time.sleep(0.3)
    late = Client(port, version)
    late.subscribe("rq/+", 2)
    time.sleep(1.0)
    with late.lock:
        got = sorted(m.payload.decode() for m in late.messages)
    if got != ["kept 0", "kept 2"]:
        fail(f"after clearing rq/1 at QoS 1: got {got}")
    for c in (pub, late):
        c.disconnect()
    print("ok")


def varint(n):
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def packet(first, body):
    return bytes([first]) + varint(len(body)) + body


def utf8(text):
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


def packets(sock):
    """Yields (first byte, body) of each packet until the broker closes; a reset fails."""
    import socket as socketlib
    buf = b""
    while True:
        while True:
            if len(buf) >= 2:
                length, shift, i = 0, 0, 1
                while i < len(buf) and i < 5:
                    length |= (buf[i] & 0x7F) << shift
                    shift += 7
                    i += 1
                    if not buf[i - 1] & 0x80:
                        break
                else:
                    i = None
                if i is not None and not buf[i - 1] & 0x80 and len(buf) >= i + length:
                    yield buf[0], buf[i:i + length]
                    buf = buf[i + length:]
                    continue
            break
        try:
            chunk = sock.recv(65536)
        except socketlib.timeout:
            fail("the broker neither answered nor closed")
        except ConnectionResetError:
            fail("the connection was reset before the broker's DISCONNECT was read")
        if not chunk:
            return
        buf += chunk


def raw_session(port, version, client_id):
    """A persistent session by hand (clean start 0, expiry an hour): its socket, packet
    stream and CONNACK's session present flag."""
    import socket as socketlib
    sock = socketlib.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    if version == 5:
        # Flags: clean start 0; properties: Session Expiry Interval 3600.
        connect = utf8("MQTT") + bytes([5, 0x00, 0, 60, 5, 0x11, 0, 0, 0x0E, 0x10]) + utf8(client_id)
    else:
        connect = utf8("MQTT") + bytes([4, 0x00, 0, 60]) + utf8(client_id)
    sock.sendall(packet(0x10, connect))
    stream = packets(sock)
    first, body = next(stream)
    if first != 0x20 or body[1] != 0:
        fail(f"CONNACK {first:#x} {body.hex()}")
    return sock, stream, bool(body[0] & 1)


def expect(stream, what):
    """The next packet: its first byte and body, failing if the broker closed first."""
    got = next(stream, None)
    if got is None:
        fail(f"the broker closed instead of sending {what}")
    return got


def qos2_resume(port, version):
    """A QoS 2 delivery across reconnects of a persistent session: the PUBLISH the client did
    not answer comes again with DUP 1 and the same packet identifier; once PUBREC is sent and
    the connection breaks, the next one gets PUBREL (no PUBLISH); after PUBCOMP, nothing."""
    props = b"\x00" if version == 5 else b""
    client_id = f"q2-resume-{version}"
    sock, stream, _ = raw_session(port, version, client_id)
    sock.sendall(packet(0x82, b"\x00\x01" + props + utf8("q2r/#") + b"\x02"))
    if expect(stream, "SUBACK")[0] != 0x90:
        fail("no SUBACK")
    Client(port, version).publish("q2r/a", b"once", 2)
    first, body = expect(stream, "PUBLISH")
    if first & 0xF0 != 0x30 or (first >> 1) & 3 != 2 or first & 0x08:
        fail(f"first delivery {first:#x}: not a QoS 2 PUBLISH with DUP 0")
    topic_len = int.from_bytes(body[:2], "big")
    packet_id = body[2 + topic_len:4 + topic_len]
    sock.close()  # no PUBREC
    sock, stream, present = raw_session(port, version, client_id)
    if not present:
        fail("the session was not present")
    first, body = expect(stream, "the PUBLISH again")
    if first & 0xF0 != 0x30 or not first & 0x08 or body[2 + topic_len:4 + topic_len] != packet_id:
        fail(f"again: {first:#x} {body.hex()}, expected DUP 1 and packet id {packet_id.hex()}")
    sock.sendall(packet(0x50, packet_id))  # PUBREC
    first, body = expect(stream, "PUBREL")
    if first != 0x62 or body[:2] != packet_id:
        fail(f"after PUBREC: {first:#x} {body.hex()}")
    sock.close()  # no PUBCOMP
    sock, stream, _ = raw_session(port, version, client_id)
    first, body = expect(stream, "PUBREL again")
    if first != 0x62 or body[:2] != packet_id:
        fail(f"after a break past PUBREC: {first:#x} {body.hex()}, expected PUBREL {packet_id.hex()}")
    sock.sendall(packet(0x70, packet_id))  # PUBCOMP
    quiet(sock, "after PUBCOMP")
    sock, stream, _ = raw_session(port, version, client_id)
    quiet(sock, "on the next connection, after PUBCOMP")
    print("ok")


def qos2_send(port, version, step):
    """A persistent session's QoS 2 PUBLISH (packet id 7, `q2in/a once`) by hand. Step `first`:
    sent, PUBREC read, the connection left without PUBREL. Step `retry` (after a broker
    restart): the PUBLISH again with DUP 1 is answered PUBREC, then PUBREL with PUBCOMP."""
    props = b"\x00" if version == 5 else b""
    sock, stream, present = raw_session(port, version, f"q2in-pub-{version}")
    dup = 0x08 if step == "retry" else 0
    sock.sendall(packet(0x34 | dup, utf8("q2in/a") + b"\x00\x07" + props + b"once"))
    first, body = expect(stream, "PUBREC")
    if first != 0x50 or body[:2] != b"\x00\x07" or body[2:3] not in (b"", b"\x00"):
        fail(f"{step}: PUBLISH answered {first:#x} {body.hex()}, expected PUBREC 7 success")
    if step == "retry":
        if not present:
            fail("the session was not present after the restart")
        sock.sendall(packet(0x62, b"\x00\x07"))
        first, body = expect(stream, "PUBCOMP")
        if first != 0x70 or body[:2] != b"\x00\x07" or body[2:3] not in (b"", b"\x00"):
            fail(f"PUBREL answered {first:#x} {body.hex()}, expected PUBCOMP 7 success")
    sock.close()
    print("ok")


def publish_fields(first, body, version):
    """A PUBLISH's QoS, DUP flag, packet identifier (bytes) and payload."""
    topic_len = int.from_bytes(body[:2], "big")
    rest = body[2 + topic_len:]
    packet_id, rest = rest[:2], rest[2:]
    if version == 5:
        # Properties: their length (one byte here: a few bytes of them at most) and them.
        rest = rest[1 + rest[0]:]
    return (first >> 1) & 3, bool(first & 0x08), packet_id, rest


def inflight_restart(port, version, step, ids=""):
    """A persistent session's deliveries in flight across a broker SIGKILL and restart, by hand.
    Step `before`: subscribed to infl/# at QoS 2, three messages published (`q1` at QoS 1, `p2`
    and `n2` at QoS 2); `p2` is answered PUBREC (and its PUBREL read), the others not; prints
    `ready ID_Q1 ID_P2 ID_N2` (hex packet ids) and waits, connected, to be killed with the
    broker. Step `after` (IDS as printed): the resumed session gets `q1` again with its packet
    id and DUP 1, PUBREL for `p2` (never its PUBLISH again), `n2` with its packet id and DUP 1;
    each is then completed, and nothing more comes. Step `final` (after another restart):
    nothing comes again."""
    props = b"\x00" if version == 5 else b""
    client_id = f"infl-{version}"
    if step == "before":
        sock, stream, _ = raw_session(port, version, client_id)
        sock.sendall(packet(0x82, b"\x00\x01" + props + utf8("infl/#") + b"\x02"))
        if expect(stream, "SUBACK")[0] != 0x90:
            fail("no SUBACK")
        pub = Client(port, version)
        for payload, q in ((b"q1", 1), (b"p2", 2), (b"n2", 2)):
            pub.publish("infl/a", payload, q)
        pub.disconnect()
        got = {}
        while len(got) < 3:
            first, body = expect(stream, "PUBLISH")
            q, dup, packet_id, payload = publish_fields(first, body, version)
            if first & 0xF0 != 0x30 or dup:
                fail(f"first delivery {first:#x} {body.hex()}: not a PUBLISH with DUP 0")
            got[payload] = (q, packet_id)
        if got[b"q1"][0] != 1 or got[b"p2"][0] != 2 or got[b"n2"][0] != 2:
            fail(f"QoS: {got}")
        sock.sendall(packet(0x50, got[b"p2"][1]))  # PUBREC
        first, body = expect(stream, "PUBREL")
        if first != 0x62 or body[:2] != got[b"p2"][1]:
            fail(f"after PUBREC: {first:#x} {body.hex()}")
        print("ready " + " ".join(got[p][1].hex() for p in (b"q1", b"p2", b"n2")), flush=True)
        time.sleep(120)
        return
    sock, stream, present = raw_session(port, version, client_id)
    if not present:
        fail("the session was not present after the restart")
    if step == "final":
        quiet(sock, "after a restart past every completion")
        print("ok")
        return
    q1, p2, n2 = (bytes.fromhex(x) for x in ids.split(","))
    seen = set()
    while len(seen) < 3:
        first, body = expect(stream, "a delivery in flight again")
        if first == 0x62:
            if body[:2] != p2:
                fail(f"PUBREL {body.hex()}, expected {p2.hex()}")
            seen.add("p2")
            continue
        if first & 0xF0 != 0x30:
            fail(f"unexpected packet {first:#x} {body.hex()}")
        q, dup, packet_id, payload = publish_fields(first, body, version)
        expected = {b"q1": (1, q1), b"n2": (2, n2)}.get(payload)
        if expected is None:
            fail(f"a PUBLISH of {payload!r} again: delivered twice as new (DUP {dup})")
        if (q, packet_id) != expected or not dup:
            fail(f"{payload!r} again as QoS {q} id {packet_id.hex()} DUP {dup}: expected {expected} DUP 1")
        seen.add(payload.decode())
    sock.sendall(packet(0x40, q1) + packet(0x70, p2) + packet(0x50, n2))  # PUBACK, PUBCOMP, PUBREC
    first, body = expect(stream, "PUBREL")
    if first != 0x62 or body[:2] != n2:
        fail(f"after PUBREC of n2: {first:#x} {body.hex()}")
    sock.sendall(packet(0x70, n2))  # PUBCOMP
    sock.settimeout(1.0)
    try:
        extra = sock.recv(65536)
        if extra:
            fail(f"after every completion the broker sent {extra.hex()}")
    except socketlib_timeout():
        pass
    sock.sendall(packet(0xE0, b"\x00" if version == 5 else b""))  # DISCONNECT
    sock.close()
    time.sleep(0.3)
    print("ok")


def socketlib_timeout():
    import socket as socketlib
    return socketlib.timeout


def quiet(sock, when):
    """Fails if the broker sends anything within a second; closes the socket."""
    import socket as socketlib
    sock.settimeout(1.0)
    try:
        extra = sock.recv(65536)
        fail(f"{when} the broker sent {extra.hex()}")
    except socketlib.timeout:
        pass
    sock.close()


def conformance(port, version):
    """What the Eclipse paho interoperability suite (client_test5.py) checks that the other
    commands do not: Server Keep Alive in CONNACK, no broker property among a QoS 2 message's
    user properties, server-to-client topic aliases, and a client past the broker's Receive
    Maximum reading DISCONNECT 0x93 while it still answers PUBRECs (no reset)."""
    import socket as socketlib
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    got = {}
    c.on_connect = lambda client, userdata, flags, reason, properties: got.setdefault("connack", properties)
    c.connect("127.0.0.1", port, keepalive=120, clean_start=True)
    c.loop_start()
    deadline = time.monotonic() + TIMEOUT
    while "connack" not in got and time.monotonic() < deadline:
        time.sleep(0.05)
    keep = getattr(got.get("connack"), "ServerKeepAlive", None)
    if keep != 60:
        fail(f"Server Keep Alive for a keep alive of 120: {keep!r}, expected 60")
    c.disconnect()
    c.loop_stop()
    sub = Client(port, 5)
    sub.subscribe("c/q2", 2)
    pub = Client(port, 5)
    publish_with(pub, "c/q2", b"x", 2, UserProperty=[("a", "2")])
    props = sub.received(1)[0].properties
    if props.UserProperty != [("a", "2")]:
        fail(f"a QoS 2 message's user properties: {props.UserProperty}")
    for client in (sub, pub):
        client.disconnect()
    # Server topic aliases: a client allowing one gets the topic named with alias 1 once, then
    # the alias alone.
    sock = socketlib.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sock.sendall(packet(0x10, utf8("MQTT") + bytes([5, 0x02, 0, 60, 3, 0x22, 0, 1]) + utf8("c-alias")))
    stream = packets(sock)
    if next(stream)[0] != 0x20:
        fail("no CONNACK")
    sock.sendall(packet(0x82, b"\x00\x01\x00" + utf8("c/alias") + b"\x00"))
    if next(stream)[0] != 0x90:
        fail("no SUBACK")
    pub = Client(port, 5)
    for i in range(3):
        publish_with(pub, "c/alias", f"a{i}".encode(), 0)
    seen = []
    for _ in range(3):
        first, body = next(stream)
        if first & 0xF0 != 0x30:
            fail(f"expected PUBLISH, got {first:#x}")
        n = int.from_bytes(body[:2], "big")
        topic, rest = body[2:2 + n].decode(), body[2 + n:]
        length, props = rest[0], rest[1:1 + rest[0]]
        alias = int.from_bytes(props[props.index(0x23) + 1:props.index(0x23) + 3], "big") if 0x23 in props[:length] else None
        seen.append((topic, alias, rest[1 + length:].decode()))
    if seen != [("c/alias", 1, "a0"), ("", 1, "a1"), ("", 1, "a2")]:
        fail(f"server topic aliases: {seen}")
    pub.disconnect()
    sock.close()
    sock = socketlib.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    connect = utf8("MQTT") + bytes([5, 0x02, 0, 60, 0]) + utf8("c-flow")
    sock.sendall(packet(0x10, connect))
    stream = packets(sock)
    first, body = next(stream)
    if first != 0x20:
        fail(f"expected CONNACK, got packet {first:#x}")
    props = body[3:]
    window = 65535
    i = 0
    while i < len(props):
        if props[i] == 0x21:
            window = int.from_bytes(props[i + 1:i + 3], "big")
        i += {0x21: 3, 0x22: 3, 0x13: 3, 0x24: 2, 0x25: 2, 0x28: 2, 0x29: 2, 0x2A: 2}.get(props[i], 1)
    for pid in range(1, window + 2):
        sock.sendall(packet(0x34, utf8("c/flow") + pid.to_bytes(2, "big") + b"\x00" + b"m"))
    reason = None
    for first, body in stream:
        if first == 0x50:
            sock.sendall(packet(0x62, body[:2]))
        elif first == 0xE0:
            reason = body[0] if body else 0
    if reason != 0x93:
        fail(f"past the Receive Maximum of {window}: DISCONNECT reason {reason!r}, expected 0x93")
    print("ok")


def redirected(port, version, hold="no"):
    """Connects and prints the CONNACK's reason (code and name) and Server Reference (5.0), as
    `connack=CODE (NAME) reference=REF`. With `hold`, stays connected and then prints the
    broker's DISCONNECT the same way (`disconnect=...`), when the broker ends the connection."""
    protocol = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=protocol)
    done = threading.Event()
    connected = []

    def said(what, reason, properties):
        reference = getattr(properties, "ServerReference", None) if properties is not None else None
        print(f"{what}={reason.value} ({reason}) reference={reference}", flush=True)

    def on_connect(_client, _userdata, _flags, reason, properties):
        said("connack", reason, properties)
        connected.append(reason.value == 0)
        if reason.value != 0 or hold != "hold":
            done.set()

    def on_disconnect(_client, _userdata, _flags, reason, properties):
        if connected == [True] and hold == "hold":
            said("disconnect", reason, properties)
        done.set()

    client.on_connect = on_connect
    client.on_disconnect = on_disconnect
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    if not done.wait(TIMEOUT):
        fail("no CONNACK or DISCONNECT came")
    client.loop_stop()


if __name__ == "__main__":
    command, port, version, *rest = sys.argv[1:]
    if command.startswith("ws-"):
        TRANSPORT = "websockets"
        command = command[len("ws-"):]
    globals()[command.replace("-", "_")](int(port), int(version), *rest)
