//! Guaranteed retained values across a broker restart, with real processes on 127.0.0.1: values
//! published with `pub --guaranteed --retain` (and MQTT QoS 1 retained publishes) are on disk
//! once acknowledged, so a SIGKILLed broker restarted on its data directory gives them to new
//! native and MQTT subscriptions, flagged retained; a newer value (best effort too) and a
//! clearing made before the kill are what comes back, not the older value.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

mod gd_common;
mod patterns_common;

use std::time::Duration;

use gd_common::start_on;
use patterns_common::{json_lines, mosquitto, mosquitto_present, retained_values, start, text, tidings};
use tidings_testkit::{http_get, BrokerProcess};

const CONFIG: &str = "[mqtt]\nlisten = \"127.0.0.1:0\"\n[limits]\nmax_retained_bytes = 4000\n";

fn retained_topics(b: &BrokerProcess) -> u64 {
    let state: serde_json::Value = serde_json::from_str(&http_get(b.ready.admin.unwrap(), "/state").unwrap()).unwrap();
    state["retained"]["topics"].as_u64().unwrap()
}

/// `tidings pub --guaranteed --retain TOPIC [PAYLOAD] EXTRA...`, which must be acknowledged.
fn pub_guaranteed(server: &str, topic: &str, payload: Option<&str>) {
    let mut args = vec!["pub", "--server", server, "--guaranteed", "--retain", topic];
    args.extend(payload);
    let out = tidings(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn mqtt_port(b: &BrokerProcess) -> String {
    b.ready.mqtt.expect("the ready line names the MQTT listener").port().to_string()
}

#[test]
fn a_broker_killed_and_restarted_keeps_its_guaranteed_retained_values() {
    let mqtt = mosquitto_present();
    let scratch = tempfile::tempdir().unwrap();
    let (data, config) = (scratch.path().join("data"), scratch.path().join("broker.toml"));
    std::fs::write(&config, CONFIG).unwrap();
    let mut b = start_on(&data, "127.0.0.1:0", &config);
    let listen = b.tcp();
    pub_guaranteed(&listen, "door.front", Some("open"));
    pub_guaranteed(&listen, "door.back", Some("shut"));
    pub_guaranteed(&listen, "door.side", Some("ajar"));
    pub_guaranteed(&listen, "door.side", None); // an empty payload clears it, on disk too
    if mqtt {
        let out = mosquitto("mosquitto_pub", &mqtt_port(&b), &["-q", "1", "-r", "-t", "door/mqtt", "-m", "m1"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    // Past the limit: refused, with the reason, and neither kept nor written.
    let out = tidings(&["pub", "--server", &listen, "--guaranteed", "--retain", "door.big", "--size", "5000"]);
    assert!(!out.status.success(), "a retained value past max_retained_bytes is refused");
    assert!(text(&out.stderr).contains("max_retained_bytes"), "{}", text(&out.stderr));
    // A newer best-effort value of a topic kept on disk replaces it there too (once written).
    let writes = b.metric("tidings_gd_retained_writes_total").unwrap();
    let out = tidings(&["pub", "--server", &listen, "door.back", "open", "--retain"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    tidings_testkit::wait_until("the newer value is written", Duration::from_secs(5), || {
        b.metric("tidings_gd_retained_writes_total").unwrap() > writes
    });
    let expected = 2 + u64::from(mqtt);
    assert_eq!(retained_topics(&b), expected);

    b.kill(); // SIGKILL
    let b = start_on(&data, &listen, &config);
    assert_eq!(retained_topics(&b), expected, "the values kept on disk are back before any client");
    let sub =
        start(&b, &["sub", "--server", &listen, "door.>", "--json", "--count", &(expected + 1).to_string()], true);
    let out = tidings(&["pub", "--server", &listen, "door.front", "live"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = json_lines(sub);
    let kept = retained_values(&got[..expected as usize]);
    let mut want = vec![("door.back".to_string(), "open".to_string()), ("door.front".into(), "open".into())];
    if mqtt {
        want.push(("door.mqtt".into(), "m1".into()));
    }
    want.sort();
    assert_eq!(kept, want, "the last values before the kill, the cleared one and the refused one left out");
    let live = &got[expected as usize];
    assert!(live.get("retained").is_none() && live["payload"] == "live", "then the live message: {live}");

    if mqtt {
        // The MQTT view: each value with its retain flag (`%r`).
        let count = expected.to_string();
        let out =
            mosquitto("mosquitto_sub", &mqtt_port(&b), &["-t", "door/#", "-C", &count, "-W", "10", "-F", "%r %t %p"]);
        let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
        lines.sort();
        assert_eq!(lines, ["1 door/back open", "1 door/front open", "1 door/mqtt m1"], "{}", text(&out.stderr));
    }
}
