//! The per-message permission checks at 1,000 rules per user, shaped like `tidings bench
//! security`'s loaded user (service topics, subtrees, one-level wildcards, one rule in 50 a
//! deny rule, the matching allow rule `bench.>` last), against one allow-all rule.
//!
//! `cargo bench -p tidings-auth --bench permissions`

// criterion_group! generates undocumented functions.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tidings_auth::{Permissions, RuleSet, Rules};
use tidings_matching::Pattern;

fn compile(texts: &[String]) -> RuleSet {
    RuleSet::new(texts.iter().filter_map(|t| Pattern::parse(t).ok()).collect())
}

/// `n` rules one way: shapes cycle through five kinds; every 50th is a deny rule.
fn loaded(n: usize) -> Rules {
    let shapes = ["svc{}.orders.created", "svc{}.pub.>", "region{}.*.sensor", "fleet.truck{}.*", "bench{}.t"];
    let (mut allow, mut deny) = (vec!["bench.>".to_string()], Vec::new());
    for i in 1..n {
        let text = shapes[i % shapes.len()].replace("{}", &i.to_string());
        if i % 50 == 0 { &mut deny } else { &mut allow }.push(text);
    }
    allow.rotate_left(1); // the matching rule last, as the bench writes it
    Rules { allow: compile(&allow), deny: compile(&deny) }
}

fn both(rules: Rules) -> Permissions {
    Permissions { publish: rules.clone(), subscribe: rules }
}

fn checks(c: &mut Criterion) {
    let everything = both(Rules { allow: compile(&[">".to_string()]), deny: RuleSet::default() });
    let thousand = both(loaded(1000));
    let mut group = c.benchmark_group("permissions");
    group.sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    for (label, permissions) in [("1 rule", &everything), ("1000 rules", &thousand)] {
        group.bench_function(format!("may_publish bench.t, {label}"), |b| {
            b.iter(|| permissions.may_publish(black_box("bench.t")))
        });
        group.bench_function(format!("may_receive bench.t, {label}"), |b| {
            b.iter(|| permissions.may_receive(black_box("bench.t")))
        });
        group.bench_function(format!("deny only (delivery) bench.t, {label}"), |b| {
            b.iter(|| permissions.subscribe.deny.matches(black_box("bench.t")))
        });
        group.bench_function(format!("may_publish svc35.orders.created, {label}"), |b| {
            b.iter(|| permissions.may_publish(black_box("svc35.orders.created")))
        });
    }
    group.finish();
}

criterion_group!(benches, checks);
criterion_main!(benches);
