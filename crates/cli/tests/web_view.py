"""The web view in a real headless Chromium (selenium + Debian's chromium-driver), against a
running `tidings net up` network: `web_view.rs` starts the network and runs this script, which
drives the page, the faults (`tidings net fault`) and the clients (`tidings pub`/`sub`), and
exits non-zero with the reason on the first check that fails.

The page is opened on e3; e1 and e2 are two hops away (through the cell HUB), so the rates of
their links reach the page only in the reports brokers flood over their links (LINK_STATS).

Usage: web_view.py TIDINGS_BIN NET_DIR PAGE_BROKER SCREENSHOT
"""

import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

BIN, NET_DIR, PAGE_BROKER, SCREENSHOT = sys.argv[1:5]
NETWORK = json.load(open(f"{NET_DIR}/network.json"))
BROKERS = {b["name"]: b for b in NETWORK["brokers"]}
RATE = 100  # messages per second the publisher sends
DEADLINE = 48  # seconds: past this the script fails, closing the browser on its way out


def log(*args):
    print(f"[{time.strftime('%H:%M:%S')}]", *args, flush=True)


def fail(why):
    log("FAIL:", why)
    sys.exit(1)


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='tidings-web-chromium-')}",
                 "--window-size=1400,1150"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def page_state(driver):
    """What the page draws: brokers and links with their data- attributes."""
    return driver.execute_script("""
        const brokers = {}, links = {};
        for (const g of document.querySelectorAll('#network g.broker'))
            brokers[g.dataset.name] = g.dataset.up === 'true';
        const num = (v) => (v === undefined ? null : Number(v));
        for (const l of document.querySelectorAll('#network line.link'))
            links[l.dataset.a + '-' + l.dataset.b] = { up: l.dataset.up === 'true',
                out: num(l.dataset.outPerS), inn: num(l.dataset.inPerS),
                ab: num(l.dataset.abPerS), ba: num(l.dataset.baPerS), stale: l.dataset.stale === 'true' };
        const pubends = [...document.querySelectorAll('#pubends tr')].slice(1)
            .map((tr) => [...tr.cells].map((td) => td.textContent));
        return { brokers, links, pubends, updates: window.tidingsUpdates || 0 };
    """)


def wait_for(driver, what, timeout, check):
    """Polls the page every 50 ms until `check(state)` holds; seconds it took."""
    start = time.monotonic()
    state = None
    while time.monotonic() - start < timeout:
        state = page_state(driver)
        if check(state):
            took = time.monotonic() - start
            log(f"{what}: {took:.2f} s")
            return took
        time.sleep(0.05)
    fail(f"{what}: not within {timeout} s; the page shows {json.dumps(state)}")


def net(*args):
    subprocess.run([BIN, "net", *args, "--dir", NET_DIR], check=True, stdout=subprocess.DEVNULL)


def messages_out(broker):
    """This broker's data messages written per link, from its /state."""
    with urllib.request.urlopen(f"http://{BROKERS[broker]['admin']}/state?filters=0") as answer:
        state = json.load(answer)
    return {c["peer"]: c["messages_out"] for c in state["connections"]}


def key(a, b):
    return "-".join(sorted([a, b]))


def stopped(signum, _frame):
    """SIGTERM (the test's timeout) or SIGALRM (DEADLINE): fail, so `finally` closes the browser."""
    fail(f"stopped by signal {signum} before the checks finished")


def main():
    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGALRM, stopped)
    signal.alarm(DEADLINE)
    expected_links = set()
    for b in BROKERS.values():
        for peer in b["peers"]:
            expected_links.add(key(b["name"], peer))
    driver = None
    clients = []
    try:
        driver = browser()
        driver.get(f"http://{BROKERS[PAGE_BROKER]['admin']}/")
        wait_for(driver, f"all {len(BROKERS)} brokers and {len(expected_links)} links shown up", 10,
                 lambda s: set(s["brokers"]) == set(BROKERS) and all(s["brokers"].values())
                 and set(s["links"]) == expected_links and all(l["up"] for l in s["links"].values()))

        # A subscriber at e1, a publisher at the page's broker: the rate appears on the links that
        # carry it (by the broker's own counters), and only there.
        clients.append(subprocess.Popen([BIN, "sub", "web.>", "-s", BROKERS["e1"]["tcp"]], stdout=subprocess.DEVNULL))
        time.sleep(1.0)  # the subscription's summary reaches the publisher's broker
        clients.append(subprocess.Popen([BIN, "pub", "web.rate", "x", "-s", BROKERS[PAGE_BROKER]["tcp"],
                                         "--count", str(RATE * 60), "--rate", str(RATE)], stdout=subprocess.DEVNULL))
        before = messages_out(PAGE_BROKER)
        own = lambda s: {k: l for k, l in s["links"].items() if PAGE_BROKER in k.split("-")}
        # Within half of the rate asked for: a loaded machine may run the publisher late (the
        # rate shown is checked against the broker's own counters below).
        wait_for(driver, f"the publisher's {RATE} msg/s shown on {PAGE_BROKER}'s links", 15,
                 lambda s: 0.5 * RATE <= sum(l["out"] or 0 for l in own(s).values()) <= 1.5 * RATE)
        time.sleep(1.5)
        after = messages_out(PAGE_BROKER)
        carrying = {key(PAGE_BROKER, p) for p, n in after.items() if n - before.get(p, 0) > 10}
        if not carrying:
            fail(f"no link of {PAGE_BROKER} carried the messages: {before} then {after}")
        state = page_state(driver)
        shown = {k for k, l in own(state).items() if (l["out"] or 0) > 5}
        if shown != carrying:
            fail(f"rate shown on {shown}, but the broker's counters say {carrying} carry it: {state['links']}")
        others = {k: l for k, l in state["links"].items() if PAGE_BROKER not in k.split("-")}
        if any(l["out"] is not None for l in others.values()):
            fail(f"a rate shown on a link this broker is not on: {others}")
        log(f"rate shown on {sorted(shown)}, which the counters confirm; other links show none")

        # A publisher at e1 and a subscriber at e2, both two hops from the page's broker: the rate
        # shows on the links e1 sends it on, none of which e3 is an end of, from their ends'
        # reports; and a guaranteed publisher at e3 shows its pubend's publish rate.
        clients.append(subprocess.Popen([BIN, "sub", "far.>", "-s", BROKERS["e2"]["tcp"]], stdout=subprocess.DEVNULL))
        clients.append(subprocess.Popen([BIN, "pub", "gd.rate", "x", "--guaranteed", "-s", BROKERS[PAGE_BROKER]["tcp"],
                                         "--count", str(RATE * 60), "--rate", str(RATE)], stdout=subprocess.DEVNULL))
        time.sleep(1.0)  # the subscription's summary reaches e1
        before = messages_out("e1")
        clients.append(subprocess.Popen([BIN, "pub", "far.rate", "x", "-s", BROKERS["e1"]["tcp"],
                                         "--count", str(RATE * 60), "--rate", str(RATE)], stdout=subprocess.DEVNULL))
        far = lambda s: {k: l for k, l in s["links"].items() if PAGE_BROKER not in k.split("-")}
        from_e1 = lambda k, l: (l["ab"] if k.split("-")[0] == "e1" else l["ba"]) or 0
        wait_for(driver, f"e1's {RATE} msg/s shown on a link {PAGE_BROKER} is not on", 10,
                 lambda s: any("e1" in k.split("-") and not l["stale"] and 0.5 * RATE <= from_e1(k, l) <= 1.5 * RATE
                               for k, l in far(s).items()))
        after = messages_out("e1")
        carrying = {key("e1", p) for p, n in after.items() if n - before.get(p, 0) > 10}
        state = page_state(driver)
        shown = {k for k, l in far(state).items() if "e1" in k.split("-") and from_e1(k, l) > 5}
        if not carrying or shown != carrying:
            fail(f"e1's rate shown on {shown}, but e1's counters say {carrying} carry it: {far(state)}")
        log(f"e1's rate shown on {sorted(shown)}, which e1's counters confirm")
        publishing = lambda s: [row for row in s["pubends"] if len(row) > 2 and row[1] == "here"
                                and row[2] not in ("", "–") and float(row[2].replace(",", "")) >= 0.5 * RATE]
        wait_for(driver, f"the guaranteed publisher's {RATE} msg/s shown as its pubend's publish rate", 8,
                 lambda s: publishing(s))
        log(f"pubend publish rate shown: {publishing(page_state(driver))[0][:3]}")

        # A cut link shows down within 2 s of the cut being asked for.
        started = time.monotonic()
        net("fault", "cut", "e1", "e2")
        took = wait_for(driver, "the cut e1-e2 link shown down", 5, lambda s: not s["links"]["e1-e2"]["up"])
        took_since_cut = time.monotonic() - started
        log(f"cut shown down {took_since_cut:.2f} s after `net fault cut` started")
        if took_since_cut > 2.0:
            fail(f"the cut link took {took_since_cut:.2f} s to show down (at most 2 s)")
        time.sleep(1.5)  # the charts gather a few more points for the screenshot
        driver.save_screenshot(SCREENSHOT)
        log(f"screenshot in {SCREENSHOT}")

        # A killed broker shows down, and so do its links; the others stay up.
        started = time.monotonic()
        net("fault", "kill", "e2")
        wait_for(driver, "the killed e2 shown down", 5, lambda s: not s["brokers"]["e2"]
                 and all(up for name, up in s["brokers"].items() if name != "e2")
                 and not any(l["up"] for k, l in s["links"].items() if "e2" in k.split("-")))
        log(f"kill shown down {time.monotonic() - started:.2f} s after `net fault kill` started")
        if page_state(driver)["updates"] < 5:
            fail("fewer than 5 updates received")

        # 100 brokers (a generated update drawn by the page's own code): the drawing stays quick.
        took_ms = driver.execute_script("""
            const n = 100, brokers = [], links = [];
            for (let i = 0; i < n; i++) brokers.push({ name: 'n' + i, cell: 'c' + Math.floor(i / 4), up: i % 17 !== 0, pubends: 0 });
            for (let i = 0; i < n; i++) {
                const seen = { a_to_b_per_s: i, b_to_a_per_s: 1, queued_at_a: i % 3, queued_at_b: null,
                               age_ms: 100 * i, stale: i % 5 === 0 };
                links.push({ a: 'n' + i, b: 'n' + ((i + 1) % n), up: true, own: null, seen });
                links.push({ a: 'n' + i, b: 'n' + ((i + 7) % n), up: i % 11 !== 0, own: null, seen: null });
            }
            const big = Object.assign({}, last, { brokers, links });
            const start = performance.now();
            for (let round = 0; round < 10; round++) { drawNetwork(big); drawPanel(big); }
            const took = (performance.now() - start) / 10;
            const drawn = document.querySelectorAll('#network g.broker').length === n
                && document.querySelectorAll('#network text.rate.seen').length === n;
            return drawn ? took : -1;
        """)
        if took_ms < 0 or took_ms > 500:
            fail(f"drawing 100 brokers: {took_ms} ms (at most 500 ms; -1: not all drawn)")
        log(f"drawing 100 brokers and 200 links: {took_ms:.1f} ms an update")
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        if errors:
            fail(f"errors in the page's console: {errors}")
        log("PASS")
    finally:
        for c in clients:
            c.kill()
            c.wait()
        if driver is not None:
            driver.quit()


main()
