#!/bin/sh
# Issue 45 part 4: 1,000 UDP subscribers on an idle machine and beside one spinning process,
# before (5a76dc7, the merge base) and after this branch, interleaved repetition by repetition,
# with NATS (TCP; it has no UDP) at the same point in the new runs. From the worktree root:
#   sh docs/results/issue45-udp/run.sh
# BASE: a release build of 5a76dc7; NEW: this branch's (cargo build --release -p tidings-cli).
set -u
NEW=${NEW:-target/release/tidings}
BASE=${BASE:-target/peers/tidings-base-5a76dc7}
OUT=${OUT:-docs/results/issue45-udp}
NATS="--nats --nats-server target/peers/nats-server --peerbench target/peers/peerbench"
point="bench subscribers --transports udp --counts 1000 --reps 1"
for rep in 1 2 3; do
  echo "rep $rep base idle: $(uptime)"
  $BASE $point --out "$OUT/base-idle-$rep" > "$OUT/base-idle-$rep.log" 2>&1
  sh -c 'while :; do :; done' &
  spin=$!
  echo "rep $rep base busy: $(uptime)"
  $BASE $point --out "$OUT/base-busy-$rep" > "$OUT/base-busy-$rep.log" 2>&1
  kill "$spin"
  echo "rep $rep new idle: $(uptime)"
  $NEW $point $NATS --out "$OUT/new-idle-$rep" > "$OUT/new-idle-$rep.log" 2>&1
  echo "rep $rep new busy: $(uptime)"
  $NEW $point $NATS --busy 1 --out "$OUT/new-busy-$rep" > "$OUT/new-busy-$rep.log" 2>&1
done
echo "end: $(uptime)"
