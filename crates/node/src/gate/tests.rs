use super::*;

const KEY: Key = (PubendId(7), PublisherId(3), 41);

fn ack(waiter: &'static str) -> Ack<&'static str> {
    Ack { waiter, tick: Some(Tick(1_000)), synced: true }
}

/// A gate that took `KEY` and whose engine appended it at tick 1,000 (proposed this turn).
fn proposed() -> Gate<&'static str> {
    let mut gate = Gate::new(1);
    gate.take(KEY, vec![1]);
    gate.appended(KEY, Tick(1_000));
    gate
}

fn record(tick: u64, seq: u64) -> Record {
    Record { tick, publisher: KEY.1 .0, seq, payload: vec![1] }
}

fn acked(tick: u64) -> Outcome {
    Outcome::Acked { key: KEY, tick: Some(tick) }
}

fn refused(leads: bool) -> Outcome {
    Outcome::Refused { key: KEY, why: "no".into(), leads }
}

fn none() -> Publishes<()> {
    Publishes::default()
}

fn append_done(up_to: u64) -> Step<&'static str> {
    Step::Feed(Input::Store(StoreInput::AppendDone { pubend: KEY.0, synced_up_to: Tick(up_to) }))
}

#[test]
fn a_publish_is_proposed_once_at_the_engines_tick() {
    let mut gate = proposed();
    assert_eq!(gate.take_batch(), vec![Step::Propose(KEY.0, vec![record(1_000, 41)])]);
    assert!(gate.take_batch().is_empty());
}

#[test]
fn the_ack_waits_for_both_halves_in_either_order() {
    let mut gate = proposed();
    assert_eq!(gate.engine_acked(KEY, ack("publisher")), EngineAck::Parked);
    let steps = gate.outcomes(vec![acked(1_000)], &none());
    assert_eq!(steps[0], Step::Answer(KEY, ack("publisher")));

    let mut gate = proposed();
    let steps = gate.outcomes(vec![acked(1_000)], &none());
    assert!(!steps.iter().any(|s| matches!(s, Step::Answer(..))), "{steps:?}");
    assert_eq!(gate.engine_acked(KEY, ack("publisher")), EngineAck::Answer(ack("publisher")));
}

#[test]
fn the_engine_hears_a_record_synced_only_once_the_group_committed_it_too() {
    let mut gate = proposed();
    // Synced here first: nothing for the engine, the group has not committed it.
    assert_eq!(gate.store_synced(KEY.0, Tick(1_000)), None);
    let steps = gate.outcomes(vec![acked(1_000)], &none());
    let confirm = Step::Feed(Input::ConfirmSilence { pubend: KEY.0, up_to: Tick(1_000) });
    assert_eq!(steps, vec![confirm, append_done(1_000)]);

    // Committed first: the engine hears it at the store's sync, and only up to there.
    let mut gate = proposed();
    gate.outcomes(vec![acked(1_000)], &none());
    assert_eq!(gate.store_synced(KEY.0, Tick(900)), Some(append_done(900)));
    assert_eq!(gate.store_synced(KEY.0, Tick(900)), None, "told once");
    assert_eq!(gate.store_synced(KEY.0, Tick(1_200)), Some(append_done(1_000)), "not past the group");
}

#[test]
fn a_tick_the_group_holds_elsewhere_is_reported() {
    let mut gate = proposed();
    let steps = gate.outcomes(vec![acked(999)], &none());
    assert_eq!(steps[0], Step::Disagree { key: KEY, group: 999, log: 1_000 });
}

#[test]
fn a_new_term_proposes_again_in_tick_order_and_drops_the_turns_batch() {
    let mut gate = proposed();
    let early = (KEY.0, KEY.1, 40);
    gate.take(early, vec![1]);
    gate.appended(early, Tick(900));
    let steps = gate.outcomes(vec![Outcome::Leads(KEY.0)], &none());
    assert_eq!(steps, vec![Step::Won(KEY.0), Step::Propose(KEY.0, vec![record(900, 40), record(1_000, 41)])]);
    assert!(gate.take_batch().is_empty(), "the turn's batch went with them");
}

#[test]
fn a_confirmation_is_silence_on_the_engines_clock() {
    let mut gate: Gate<&str> = Gate::new(10);
    let steps = gate.outcomes(vec![Outcome::Confirmed { pubend: KEY.0, at: 5 }], &none());
    assert_eq!(steps, vec![Step::Feed(Input::ConfirmSilence { pubend: KEY.0, up_to: Tick(50) })]);
}

#[test]
fn a_refusal_while_leading_before_the_engines_ack_is_proposed_again_at_that_ack() {
    let mut gate = proposed();
    gate.take_batch();
    let steps = gate.outcomes(vec![refused(true)], &none());
    assert_eq!(steps, vec![Step::RefusedLeading { key: KEY, why: "no".into() }], "nothing parked yet");
    // Before the change the engine's acknowledgement was parked for a group answer that never
    // came in this term: the publisher waited for good.
    assert_eq!(gate.engine_acked(KEY, ack("publisher")), EngineAck::Parked);
    assert_eq!(gate.take_batch(), vec![Step::Propose(KEY.0, vec![record(1_000, 41)])], "proposed again");
    // The group refuses it again: the parked acknowledgement becomes the refusal.
    let steps = gate.outcomes(vec![refused(true)], &none());
    assert_eq!(steps[1], Step::Refuse(KEY, "publisher", "no".into()));
}

#[test]
fn a_retry_after_a_refusal_while_leading_is_proposed_again() {
    let mut gate = proposed();
    gate.take_batch();
    gate.engine_acked(KEY, ack("first"));
    assert!(gate.take_batch().is_empty(), "proposed at its append: waits for the group");
    let steps = gate.outcomes(vec![refused(true)], &none());
    assert_eq!(steps[1], Step::Refuse(KEY, "first", "no".into()));
    assert_eq!(gate.engine_acked(KEY, ack("retry")), EngineAck::Parked);
    assert_eq!(gate.take_batch().len(), 1);
    assert_eq!(gate.parked.get(&KEY).map(|a| a.waiter), Some("retry"));
}

#[test]
fn a_refusal_while_not_leading_waits_for_a_new_term() {
    let mut gate = proposed();
    gate.take_batch();
    assert!(gate.outcomes(vec![refused(false)], &none()).is_empty());
    assert_eq!(gate.engine_acked(KEY, ack("publisher")), EngineAck::Parked);
    assert!(gate.take_batch().is_empty(), "proposed again only when this broker leads");
}

#[test]
fn the_engines_ack_after_the_groups_is_answered_and_one_never_taken_is_refused() {
    let mut gate = proposed();
    gate.outcomes(vec![acked(1_000)], &none());
    assert_eq!(gate.engine_acked(KEY, ack("publisher")), EngineAck::Answer(ack("publisher")));
    assert_eq!(gate.engine_acked(KEY, ack("repeat")), EngineAck::NotTaken(ack("repeat")));
}

#[test]
fn a_retry_answered_from_the_engines_table_is_proposed_at_the_remembered_tick() {
    let mut gate: Gate<&'static str> = Gate::new(1);
    gate.take(KEY, vec![1]);
    assert_eq!(gate.engine_acked(KEY, ack("retry")), EngineAck::Parked);
    assert_eq!(gate.take_batch(), vec![Step::Propose(KEY.0, vec![record(1_000, 41)])]);
}

#[test]
fn a_closed_pubend_gives_back_its_waiters() {
    let mut gate = proposed();
    gate.engine_acked(KEY, ack("publisher"));
    let other = (KEY.0, KEY.1, 42);
    gate.take(other, vec![1]);
    gate.appended(other, Tick(1_001));
    gate.outcomes(vec![Outcome::Acked { key: other, tick: Some(1_001) }], &none());
    let (parked, acked) = gate.forget_pubend(KEY.0);
    assert_eq!(parked, vec![(KEY, ack("publisher"))]);
    assert_eq!(acked, vec![other]);
    assert!(gate.take_batch().is_empty());
    assert_eq!(gate.store_synced(KEY.0, Tick(2_000)), None, "its frontier went too");
}
