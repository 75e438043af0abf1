#!/bin/sh
set -u
# A/B of issue 45 part 3: BEFORE is a release build of f67bbcc (the measuring bench, the broker
# as it was), AFTER a release build of the change. Each round runs one repetition of
# `bench acked` with each binary (the order swapped every other round), so a change in the
# machine's load falls on both; each writes its own CSV. From the repository's root:
#   BEFORE=PATH AFTER=PATH sh docs/results/issue45-switches/ab.sh OUT ROUNDS [bench acked args]
BEFORE=${BEFORE:?a release build of f67bbcc}
AFTER=${AFTER:?a release build of the change}
OUT=$1
ROUNDS=$2
shift 2
mkdir -p "$OUT"
for round in $(seq 1 "$ROUNDS"); do
  order="before after"
  [ $((round % 2)) = 0 ] && order="after before"
  for side in $order; do
    [ "$side" = before ] && bin=$BEFORE || bin=$AFTER
    echo "round $round $side: $(uptime)"
    nice -n 19 "$bin" bench acked --reps 1 "$@" --csv "$OUT/$side-$round.csv" 2>&1 | grep "rep 1"
  done
done
echo "end: $(uptime)"
