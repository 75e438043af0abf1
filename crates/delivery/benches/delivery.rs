//! Cost per message of the delivery core at the publisher's broker (publish, append completion,
//! first-time Data), an intermediate broker (Data in, Data out) and a subscriber-hosting broker
//! (Data in, one delivery) with 1, 100 and 10,000 subends on the stream; and the memory of a
//! stream after 1,000,000 ticks of mixed data and silence (printed, not timed).

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tidings_delivery::{
    Action, BrokerId, CellId, ChildLink, Engine, Input, Matcher, Message, Millis, PubendId, PublisherId, Recovered,
    Settings, StoreInput, StreamRoute, SubendId, Tick, TreeTag, UpstreamCell, Verdict,
};

const P: PubendId = PubendId(1);

/// Every child matches; payload bytes 0..8 name the one subend the message is for (what a
/// matching index returns: only the subends that match, whatever their number).
struct OneSubend;

impl Matcher for OneSubend {
    fn child(&self, _: PubendId, _: CellId, _: &Bytes) -> Verdict {
        Verdict::Data
    }
    fn subends(&self, _: PubendId, payload: &Bytes, out: &mut Vec<SubendId>) {
        out.push(SubendId(target(payload)));
    }
    fn subend(&self, _: PubendId, subend: SubendId, payload: &Bytes) -> bool {
        subend.0 == target(payload)
    }
    fn epoch(&self) -> u64 {
        0
    }

    fn tree(&self, _: PubendId) -> TreeTag {
        TreeTag(0)
    }
}

fn target(payload: &Bytes) -> u64 {
    let mut id = [0u8; 8];
    id.copy_from_slice(&payload[..8]);
    u64::from_le_bytes(id)
}

fn payload(subend: u64) -> Bytes {
    let mut bytes = vec![0u8; 100];
    bytes[..8].copy_from_slice(&subend.to_le_bytes());
    Bytes::from(bytes)
}

fn relay_route(children: Vec<ChildLink>) -> StreamRoute {
    StreamRoute { upstream: Some(UpstreamCell { cell: CellId(0), brokers: vec![BrokerId(0)] }), children }
}

fn child() -> ChildLink {
    ChildLink { cell: CellId(2), broker: BrokerId(2), via: None }
}

fn phb(c: &mut Criterion) {
    let mut group = c.benchmark_group("delivery/phb");
    group.throughput(Throughput::Elements(1));
    group.bench_function("publish+append+send", |b| {
        let mut engine = Engine::new(Settings::default(), OneSubend);
        let mut out = Vec::new();
        let now = Millis(1);
        engine.handle(
            now,
            Input::Route { pubend: P, route: StreamRoute { upstream: None, children: vec![child()] } },
            &mut out,
        );
        engine.handle(now, Input::Store(StoreInput::Opened { pubend: P, recovered: Recovered::default() }), &mut out);
        let message = payload(0);
        let mut seq = 0u64;
        b.iter(|| {
            seq += 1;
            out.clear();
            let now = Millis(1 + seq / 100);
            engine.handle(
                now,
                Input::Publish { pubend: P, publisher: PublisherId(1), seq, payload: message.clone() },
                &mut out,
            );
            let tick = out.iter().find_map(|a| match a {
                Action::Store(tidings_delivery::StoreAction::Append { tick, .. }) => Some(*tick),
                _ => None,
            });
            if let Some(tick) = tick {
                engine.handle(now, Input::Store(StoreInput::AppendDone { pubend: P, synced_up_to: tick }), &mut out);
                if seq.is_multiple_of(64) {
                    let ack = Message::Ack { pubend: P, ack_prefix: tick, release_prefix: tick };
                    engine.handle(
                        now,
                        Input::Received { from: BrokerId(2), from_cell: CellId(2), message: ack },
                        &mut out,
                    );
                }
            }
            black_box(out.len())
        });
    });
    group.finish();
}

/// Feeds first-time Data ticks 10 apart with silence between, as an upstream would.
fn data(tick: u64, payload: &Bytes) -> Input {
    let message = Message::Data {
        pubend: P,
        tick: Tick(tick),
        final_from: Tick(tick - 9),
        final_to: Tick(tick),
        requested_only: false,
        tree: TreeTag(0),
        payload: payload.clone(),
    };
    Input::Received { from: BrokerId(0), from_cell: CellId(0), message }
}

fn ib(c: &mut Criterion) {
    let mut group = c.benchmark_group("delivery/ib");
    group.throughput(Throughput::Elements(1));
    group.bench_function("data in, data out", |b| {
        let mut engine = Engine::new(Settings::default(), OneSubend);
        let mut out = Vec::new();
        engine.handle(Millis(1), Input::Route { pubend: P, route: relay_route(vec![child()]) }, &mut out);
        let message = payload(0);
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            out.clear();
            let now = Millis(1 + n / 100);
            engine.handle(now, data(10 * n, &message), &mut out);
            if n.is_multiple_of(64) {
                let ack = Message::Ack { pubend: P, ack_prefix: Tick(10 * n), release_prefix: Tick(10 * n) };
                engine.handle(now, Input::Received { from: BrokerId(2), from_cell: CellId(2), message: ack }, &mut out);
            }
            black_box(out.len())
        });
    });
    group.finish();
}

fn shb(c: &mut Criterion) {
    let mut group = c.benchmark_group("delivery/shb");
    group.throughput(Throughput::Elements(1));
    for subends in [1u64, 100, 10_000] {
        group.bench_with_input(BenchmarkId::new("data in, one delivery", subends), &subends, |b, &subends| {
            let mut engine = Engine::new(Settings::default(), OneSubend);
            let mut out = Vec::new();
            engine.handle(Millis(1), Input::Route { pubend: P, route: relay_route(vec![]) }, &mut out);
            for s in 0..subends {
                engine.handle(
                    Millis(1),
                    Input::SubendAttach { pubend: P, subend: SubendId(s), start: Some(Tick(1)), durable: false },
                    &mut out,
                );
            }
            let payloads: Vec<Bytes> = (0..subends.min(1024)).map(payload).collect();
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                out.clear();
                let message = &payloads[(n % payloads.len() as u64) as usize];
                engine.handle(Millis(1 + n / 100), data(10 * n, message), &mut out);
                black_box(out.len())
            });
        });
    }
    group.finish();
}

/// Memory of one stream after 1,000,000 ticks: a Data every 10 ticks (100,000 messages of 100
/// bytes) with silence between, at an SHB with one subend; acknowledged as it goes, and not.
fn memory(_: &mut Criterion) {
    for (label, subend) in [("with a live subend (acks flow)", true), ("at an IB whose child never acks", false)] {
        let mut engine = Engine::new(Settings::default(), OneSubend);
        let mut out = Vec::new();
        let children = if subend { vec![] } else { vec![child()] };
        engine.handle(Millis(1), Input::Route { pubend: P, route: relay_route(children) }, &mut out);
        if subend {
            engine.handle(
                Millis(1),
                Input::SubendAttach { pubend: P, subend: SubendId(0), start: Some(Tick(1)), durable: false },
                &mut out,
            );
        }
        let message = payload(0);
        for n in 1..=100_000u64 {
            out.clear();
            engine.handle(Millis(n / 10), data(10 * n, &message), &mut out);
        }
        let Some(view) = engine.inspect(P) else { continue };
        eprintln!(
            "delivery/memory 1,000,000 ticks, {label}: ~{} bytes ({} knowledge runs, {} payloads cached)",
            engine.stream_bytes(P).unwrap_or(0),
            view.runs(),
            view.cached()
        );
    }
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20)
}

criterion_group! { name = benches; config = config(); targets = phb, ib, shb, memory }
criterion_main!(benches);
