#!/bin/sh
# A/B of the latency publisher: OLD and NEW tidings binaries alternated, each beside NATS (interleaved inside each run).
# Usage: OLD=... NEW=... NATS=... OUT=dir sh ab.sh
set -e
mkdir -p "$OUT"
for round in 1 2 3; do
  for side in old new; do
    if [ $side = old ]; then T=$OLD; else T=$NEW; fi
    echo "== round $round $side (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    TIDINGS_BENCH_JSON="$OUT/$side.jsonl" "$T" bench latency --subs 10 --nats --nats-server "$NATS" --reps 3 2>&1 | grep -E "tidings:|nats:|tidings / NATS"
  done
done
echo "== end (load: $(cut -d' ' -f1-3 /proc/loadavg))"
