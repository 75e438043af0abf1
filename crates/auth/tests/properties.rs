//! Deny always wins, the compiled rules agree with the patterns they came from, and a wildcard
//! subscription that overlaps a denied topic never receives a message on it.

use proptest::prelude::*;
use tidings_auth::{overlap, Permissions, RuleSet, Rules, SubscribeDecision};
use tidings_matching::Pattern;

const LEVELS: [&str; 3] = ["a", "b", "c"];

fn topic() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(LEVELS.to_vec()), 1..4).prop_map(|l| l.join("."))
}

fn pattern() -> impl Strategy<Value = Pattern> {
    let level = prop::sample::select(vec!["a", "b", "c", "*"]);
    (prop::collection::vec(level, 1..4), any::<bool>()).prop_filter_map("valid", |(mut levels, rest)| {
        if rest {
            levels.push(">");
        }
        Pattern::parse(&levels.join(".")).ok()
    })
}

fn rules() -> impl Strategy<Value = RuleSet> {
    prop::collection::vec(pattern(), 0..5).prop_map(RuleSet::new)
}

/// Every topic of up to four levels over the alphabet: small enough to enumerate.
fn all_topics() -> Vec<String> {
    let mut out: Vec<String> = LEVELS.iter().map(|l| l.to_string()).collect();
    let mut last = out.clone();
    for _ in 1..4 {
        last = last.iter().flat_map(|t| LEVELS.iter().map(move |l| format!("{t}.{l}"))).collect();
        out.extend(last.iter().cloned());
    }
    out
}

proptest! {
    #[test]
    fn the_trie_agrees_with_the_patterns(set in rules(), t in topic()) {
        let linear = set.patterns().iter().any(|p| p.matches(&t));
        prop_assert_eq!(set.matches(&t), linear);
    }

    #[test]
    fn deny_always_wins(allow in rules(), deny in rules(), t in topic()) {
        let both = Rules { allow: allow.clone(), deny: deny.clone() };
        let permissions = Permissions { publish: both.clone(), subscribe: both };
        if deny.matches(&t) {
            prop_assert!(!permissions.may_publish(&t));
            prop_assert!(!permissions.may_receive(&t));
        } else {
            prop_assert_eq!(permissions.may_publish(&t), allow.matches(&t));
        }
    }

    #[test]
    fn a_taken_subscription_never_receives_a_denied_topic(allow in rules(), deny in rules(), p in pattern()) {
        let permissions = Permissions { publish: Rules::default(), subscribe: Rules { allow, deny: deny.clone() } };
        let decision = permissions.subscribe(&p);
        for t in all_topics().iter().filter(|t| p.matches(t)) {
            // What the delivery path checks: a denied topic is never delivered.
            if deny.matches(t) {
                prop_assert!(!permissions.may_receive(t));
                prop_assert_ne!(decision, SubscribeDecision::Allowed, "{} overlaps a denied {}", p, t);
            }
            if decision != SubscribeDecision::Denied && !deny.matches(t) {
                prop_assert!(permissions.may_receive(t), "taken {} but {} refused", p, t);
            }
        }
    }

    /// The delivery path checks only deny rules, and only for filtered subscriptions: sound
    /// because a taken subscription's topics are all allowed, and an allowed one's never denied.
    #[test]
    fn delivery_needs_only_the_deny_rules_and_only_when_filtered(allow in rules(), deny in rules(), p in pattern()) {
        let permissions = Permissions { publish: Rules::default(), subscribe: Rules { allow, deny } };
        let decision = permissions.subscribe(&p);
        for t in all_topics().iter().filter(|t| p.matches(t)) {
            if decision != SubscribeDecision::Denied {
                prop_assert_eq!(permissions.may_receive(t), !permissions.withholds(t), "{} on {}", t, p);
            }
            if decision == SubscribeDecision::Allowed {
                prop_assert!(!permissions.withholds(t), "allowed {} yet {} is denied", p, t);
            }
        }
    }

    #[test]
    fn overlap_means_a_shared_topic(a in pattern(), b in pattern()) {
        let shared = all_topics().iter().any(|t| a.matches(t) && b.matches(t));
        // Patterns of up to four levels plus `>` share a topic of at most five levels; the
        // enumeration stops at four, so a found one proves overlap and none is checked exactly
        // only for patterns without `>`.
        if shared {
            prop_assert!(overlap(&a, &b));
        }
        if !a.as_str().contains('>') && !b.as_str().contains('>') {
            prop_assert_eq!(overlap(&a, &b), shared);
        }
    }
}

#[test]
fn a_subscriber_to_everything_under_a_deny_rule_is_filtered_not_refused() {
    let p = |s: &str| Pattern::parse(s).ok().into_iter().collect::<Vec<_>>();
    let permissions = Permissions {
        publish: Rules::default(),
        subscribe: Rules { allow: RuleSet::new(p(">")), deny: RuleSet::new(p("secret.>")) },
    };
    let all = Pattern::parse(">").ok();
    let secret = Pattern::parse("secret.x").ok();
    let (Some(all), Some(secret)) = (all, secret) else { panic!("patterns") };
    assert_eq!(permissions.subscribe(&all), SubscribeDecision::Filtered);
    assert_eq!(permissions.subscribe(&secret), SubscribeDecision::Denied);
    assert!(permissions.may_receive("public.x"));
    assert!(!permissions.may_receive("secret.x"));
    assert!(!Permissions::default().may_publish("anything"), "no rules: nothing allowed");
}

/// The delivery check at 1,000 rules per user: a trie walk, so its cost follows the topic's
/// depth, not the rule count. Printed for the report; the bound is loose enough for a debug
/// build on a shared machine yet fails if the check became a scan of the rules per message.
#[test]
fn a_thousand_rules_cost_a_trie_walk_not_a_scan() {
    let rules: Vec<Pattern> = (0..1000).filter_map(|i| Pattern::parse(&format!("tenant{i}.*.orders.>")).ok()).collect();
    let deny = RuleSet::new(rules.clone());
    let permissions = Permissions {
        publish: Rules { allow: RuleSet::new(vec![]), deny: deny.clone() },
        subscribe: Rules { allow: RuleSet::new(Pattern::parse(">").ok().into_iter().collect()), deny },
    };
    let topics: Vec<String> = (0..1000).map(|i| format!("tenant{}.eu.orders.{i}", i * 7 % 1500)).collect();
    let rounds = 200;
    let start = std::time::Instant::now();
    let mut passed = 0usize;
    for _ in 0..rounds {
        passed += topics.iter().filter(|t| permissions.may_receive(t)).count();
    }
    let per_check = start.elapsed() / (rounds * topics.len()) as u32;
    let scan_start = std::time::Instant::now();
    let mut scanned = 0usize;
    for _ in 0..rounds / 10 {
        scanned += topics.iter().filter(|t| !rules.iter().any(|r| r.matches(t))).count();
    }
    let per_scan = scan_start.elapsed() / (rounds / 10 * topics.len()) as u32;
    println!("1,000 rules: {per_check:?} a delivery check (trie), {per_scan:?} a linear scan");
    assert_eq!(passed / rounds, scanned / (rounds / 10), "the trie and the scan agree");
    assert!(per_check * 20 < per_scan, "the check must not scan the rules: {per_check:?} vs {per_scan:?}");
}
