//! An in-process broker with only its MQTT listener, on a loopback port chosen at run time,
//! for the broker's own MQTT tests (`mqtt_idle_heap.rs`, `mqtt_takeover.rs`).
#![allow(clippy::expect_used)] // a test harness: a failed step is a failed test

use tidings_broker::config::Config;

/// The configuration: MQTT and native TCP on 127.0.0.1:0, no UDP, no admin port, data in `dir`.
pub(crate) fn config(dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.listen.tcp = "127.0.0.1:0".into();
    config.listen.udp = String::new();
    config.listen.admin = String::new();
    config.mqtt.listen = "127.0.0.1:0".into();
    config.storage.dir = dir.display().to_string();
    config
}
