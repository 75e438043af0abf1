#!/bin/sh
# Issue 45 part 1 in a quiet window: tidings beside NATS, interleaved, 3 reps each point.
# Usage: TIDINGS=path/to/tidings NATS=path/to/nats-server OUT=dir sh run.sh
set -e
T=${TIDINGS:-target/release/tidings}
N=${NATS:-target/peers/nats-server}
OUT=${OUT:-.}
mkdir -p "$OUT"
export TIDINGS_BENCH_JSON="$OUT/rows.jsonl"
run() {
  echo "== $* (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  "$T" bench "$@" --nats --nats-server "$N" --reps 3
  echo "== after (load: $(cut -d' ' -f1-3 /proc/loadavg))"
}
run tput --size 256 --subs 1
run tput --size 2000 --subs 1
run tput --size 2000 --subs 10
run tput --size 256 --subs 100
run latency --subs 10
run latency --subs 100
run latency --subs 1000
