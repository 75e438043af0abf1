//! The MQTT topic mapping of `tidings_wire::mqtt::topic` held against tidings' own matching:
//! for random MQTT names and filters, MQTT's rule computed directly agrees with tidings'
//! matching of the mapped forms, every mapped form is a valid tidings topic or pattern, and
//! names round-trip. Lives here because `matching` depends on `wire`, not the other way round.

use proptest::prelude::*;
use tidings_matching::{Pattern, Topic};
use tidings_wire::mqtt::strategies::{filter, level, name};
use tidings_wire::mqtt::topic::{filter_to_tidings, mqtt_matches, name_to_tidings, tidings_to_name};

/// Whether the tidings forms of `filter` match the tidings form of `name`.
fn tidings_matches(filter: &str, name: &str) -> Result<bool, TestCaseError> {
    let topic = Topic::parse(&name_to_tidings(name)).map_err(|e| TestCaseError::fail(format!("{name:?}: {e}")))?;
    let mapped = filter_to_tidings(filter);
    let mut matched = false;
    for pattern in &mapped.patterns {
        let pattern = Pattern::parse(pattern).map_err(|e| TestCaseError::fail(format!("{filter:?}: {e}")))?;
        matched |= pattern.matches(topic.as_str());
    }
    Ok(matched && mapped.admits(topic.as_str()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn names_round_trip_through_tidings_topics(name in name()) {
        let topic = name_to_tidings(&name);
        prop_assert!(Topic::parse(&topic).is_ok(), "{:?} -> {:?}", name, topic);
        prop_assert_eq!(tidings_to_name(&topic), Some(name));
    }

    #[test]
    fn mqtt_matching_agrees_with_tidings_matching_of_the_mapped_forms(filter in filter(), name in name()) {
        prop_assert_eq!(mqtt_matches(&filter, &name), tidings_matches(&filter, &name)?, "{:?} {:?}", filter, name);
    }

    /// Names built from the filter's own levels, so that matches are frequent, not rare.
    #[test]
    fn matching_agrees_on_names_derived_from_the_filter(filter in filter(), extra in prop::collection::vec(level(), 0..3), cut in 0usize..4) {
        let mut levels: Vec<String> = filter.split('/').map(|l| if l == "+" || l == "#" { "a".to_string() } else { l.to_string() }).collect();
        levels.truncate(levels.len().saturating_sub(cut % 2));
        levels.extend(extra);
        let name = levels.join("/");
        prop_assume!(!name.is_empty());
        prop_assert_eq!(mqtt_matches(&filter, &name), tidings_matches(&filter, &name)?, "{:?} {:?}", filter, name);
    }

    /// A tidings topic outside the mapping's image maps to no MQTT name, and one inside maps back.
    #[test]
    fn reverse_mapping_accepts_exactly_the_image(topic in "[ab%/.0-9A-F]{1,6}") {
        if let Some(name) = tidings_to_name(&topic) {
            prop_assert_eq!(name_to_tidings(&name), topic);
        }
    }
}

#[test]
fn dollar_names_are_not_matched_by_a_leading_wildcard() {
    for (filter, name, expected) in [
        ("#", "$SYS/x", false),
        ("+/x", "$SYS/x", false),
        ("$SYS/#", "$SYS/x", true),
        ("a/#", "a", true),
        ("+", "/", false),
    ] {
        assert_eq!(mqtt_matches(filter, name), expected, "{filter} {name}");
        assert_eq!(tidings_matches(filter, name).unwrap(), expected, "{filter} {name}");
    }
}
