//! Black-box tests of content-based subscriptions through the real broker and client.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tidings_client::{Client, SubscribeOptions};
use tidings_testkit::BrokerProcess;
use tidings_wire::{Property, ReasonCode, Value};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

async fn collect(sub: &mut tidings_client::Subscription, until: &str) -> Vec<i64> {
    let mut got = Vec::new();
    loop {
        let d = tokio::time::timeout(Duration::from_secs(10), sub.next()).await.unwrap().unwrap();
        if d.payload[..] == *until.as_bytes() {
            return got;
        }
        match d.property("n") {
            Some(Value::Int(n)) => got.push(*n),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn subscribers_with_different_selectors_get_exactly_their_messages() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let addr = b.tcp();
    let client = Client::connect(addr.as_str()).await.unwrap();
    let selectors = [
        "sym = 'IBM' AND price > 100",
        "sym IN ('MSFT', 'ORCL') OR price BETWEEN 10 AND 20",
        "sym LIKE 'I%' AND NOT live",
        "venue IS NULL",
        "price * 2 >= 250.5",
    ];
    let mut subs = Vec::new();
    for s in selectors {
        let selector = format!("({s}) OR n = -1");
        subs.push(client.subscribe_with(SubscribeOptions::new("ticks.>").selector(selector)).await.unwrap());
    }
    let publisher = Client::connect(addr.as_str()).await.unwrap();
    let syms = ["IBM", "MSFT", "ORCL", "INTC", "AAPL"];
    let mut messages = Vec::new();
    for n in 0..200i64 {
        let mut props = vec![
            Property::new("n", n),
            Property::new("sym", syms[(n % 5) as usize]),
            Property::new("price", (n * 7) % 300),
            Property::new("live", n % 3 == 0),
        ];
        if n % 4 == 0 {
            props.push(Property::new("venue", "X"));
        }
        publisher.publish_with("ticks.eq", &props, Bytes::new()).await.unwrap();
        messages.push(props);
    }
    // A marker every subscription matches (each selector is OR'd with `n = -1`), to know when
    // each has everything.
    let marker = [Property::new("n", -1i64)];
    publisher.publish_with("ticks.eq", &marker, Bytes::from_static(b"end")).await.unwrap();
    // The reference: the same predicates written in Rust over the published properties.
    let expect = |f: &dyn Fn(&str, i64, bool, bool) -> bool| -> Vec<i64> {
        messages
            .iter()
            .filter_map(|p| {
                let (Value::Int(n), Value::Str(sym), Value::Int(price), Value::Bool(live)) =
                    (&p[0].value, &p[1].value, &p[2].value, &p[3].value)
                else {
                    unreachable!()
                };
                let has_venue = p.len() > 4;
                f(sym, *price, *live, has_venue).then_some(*n)
            })
            .collect()
    };
    let want: Vec<Vec<i64>> = vec![
        expect(&|sym, price, _, _| sym == "IBM" && price > 100),
        expect(&|sym, price, _, _| sym == "MSFT" || sym == "ORCL" || (10..=20).contains(&price)),
        expect(&|sym, _, live, _| sym.starts_with('I') && !live),
        expect(&|_, _, _, has_venue| !has_venue),
        expect(&|_, price, _, _| (price * 2) as f64 >= 250.5),
    ];
    for (sub, want) in subs.iter_mut().zip(want) {
        let got = collect(sub, "end").await;
        assert!(!want.is_empty());
        assert_eq!(got, want);
    }
    let m = b.metrics().unwrap();
    assert!(tidings_testkit::metric_value(&m, "tidings_selector_subscriptions") == 5.0, "{m}");
}

#[tokio::test]
async fn a_bad_selector_is_refused_and_changes_nothing() {
    let b = BrokerProcess::start(bin(), &[]).unwrap();
    let addr = b.tcp();
    let good = Client::connect(addr.as_str()).await.unwrap();
    let mut sub = good.subscribe_with(SubscribeOptions::new("t").selector("x > 1")).await.unwrap();
    let bad = Client::builder(addr.as_str()).no_reconnect().connect().await.unwrap();
    let err = bad.subscribe_with(SubscribeOptions::new("t").selector("x > > 1")).await.unwrap_err();
    assert_eq!(err.reason(), Some(ReasonCode::InvalidSelector), "{err}");
    assert_eq!(b.metric("tidings_subscriptions").unwrap(), 1.0);
    good.publish_with("t", &[Property::new("x", 2i64)], Bytes::from_static(b"ok")).await.unwrap();
    let d = tokio::time::timeout(Duration::from_secs(10), sub.next()).await.unwrap().unwrap();
    assert_eq!(d.payload, Bytes::from_static(b"ok"));
}

#[test]
fn sub_where_prints_a_caret_under_the_error_and_exits_nonzero() {
    let out = Command::new(bin()).args(["sub", "t", "--where", "price > AND 3"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let source = lines.iter().position(|l| l.contains("price > AND 3")).expect("the selector is echoed");
    let caret = lines[source + 1];
    let col = caret.find('^').expect("a caret line follows");
    assert_eq!(&lines[source][col..col + 3], "AND", "{err}");
}
