//! Streams stuck at the end of a schedule, read from the brokers' `/state`: a failing
//! schedule's report names them, so the first look at a loss starts at the broker where a
//! stream stopped rather than in twelve logs (seed 684 of 2026-12-01: s2's stream of one
//! pubend 14.6 s behind, the same eight ticks nacked since, the answers dropped a hop above).

use serde_json::Value;

/// How far a stream's doubt horizon may trail its pubend's clock, with nacks of its own still
/// open, before it counts as stuck: an idle stream is kept current by silence within its
/// pubend's silence period (well under a second), and a fault's outage heals in a few.
pub const STUCK_AFTER_MS: u64 = 5_000;

/// The streams of one broker's `/state` that trail their pubend by more than
/// [`STUCK_AFTER_MS`] while this broker still nacks ticks of them, one line each: the broker,
/// the pubend, how far behind, what it waits on and from whom. A state that does not parse
/// gives nothing.
pub fn stuck_streams(broker: &str, state: &str) -> Vec<String> {
    let Ok(state) = serde_json::from_str::<Value>(state) else { return Vec::new() };
    let Some(pubends) = state.pointer("/guaranteed/pubends").and_then(Value::as_array) else { return Vec::new() };
    let mut lines = Vec::new();
    for stream in pubends {
        let lag = stream.get("horizon_lag_ms").and_then(Value::as_u64).unwrap_or(0);
        let own = stream
            .get("nacks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|nacks| nacks.get("broker").and_then(Value::as_str) == Some(broker));
        let (Some(own), true) = (own, lag > STUCK_AFTER_MS) else { continue };
        let ranges = own.get("ranges").and_then(Value::as_array).map_or(0, Vec::len);
        let more = if own.get("more").and_then(Value::as_bool) == Some(true) { "+" } else { "" };
        let first = own.pointer("/ranges/0/0").and_then(Value::as_u64).unwrap_or(0);
        let text = |key: &str| stream.get(key).map(ToString::to_string).unwrap_or_default();
        lines.push(format!(
            "{broker}: pubend {} {:.1} s behind, nacking {ranges}{more} ranges from tick {first} to {}",
            text("pubend").trim_matches('"'),
            lag as f64 / 1000.0,
            text("upstream"),
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(lag: u64, nacker: &str) -> String {
        serde_json::json!({"guaranteed": {"pubends": [{
            "pubend": "a865b7dd0810196b", "horizon_lag_ms": lag, "upstream": ["s3"],
            "nacks": [{"broker": nacker, "more": true, "ranges": [[1796176776634000u64, 1796176776634000u64]]}],
        }]}})
        .to_string()
    }

    #[test]
    fn a_stream_far_behind_with_its_own_nacks_open_is_stuck() {
        let lines = stuck_streams("s2", &state(14_685, "s2"));
        assert_eq!(
            lines,
            ["s2: pubend a865b7dd0810196b 14.7 s behind, nacking 1+ ranges from tick 1796176776634000 to [\"s3\"]"]
        );
    }

    #[test]
    fn a_stream_behind_by_less_or_only_relaying_nacks_is_not() {
        assert!(stuck_streams("s2", &state(800, "s2")).is_empty(), "within a fault's heal");
        assert!(stuck_streams("s3", &state(14_685, "s2")).is_empty(), "the nacks are a child's");
        assert!(stuck_streams("s2", "not json").is_empty());
    }
}
