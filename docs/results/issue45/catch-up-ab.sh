#!/bin/bash
# The catch-up A/B of 2026-12-01 (JOURNAL): the driver's replay and the cursor alternated,
# `tidings bench catch-up --reps 3` each, PAIRS times, the load noted before and after.
# usage: catch-up-ab.sh TIDINGS_BINARY PAIRS LOG [RATE]   (RATE: [guaranteed] catch_up_rate)
# then:  python3 catch-up-to-csv.py COMMIT LOG > rows.csv
set -e
bin=$1; pairs=$2; log=$3; rate=${4:-0}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for mode in replay cursor; do
  cursor=false; [ $mode = cursor ] && cursor=true
  printf '[guaranteed]\ncatch_up_cursor = %s\ncatch_up_rate = %s\n' $cursor $rate > "$dir/$mode.toml"
done
for i in $(seq 1 "$pairs"); do
  for mode in replay cursor; do
    echo "== pair $i mode $mode start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> "$log"
    "$bin" bench catch-up --reps 3 --dir "$dir" --broker-config "$dir/$mode.toml" 2>&1 | grep -E "rep [0-9]:|median" >> "$log"
    echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> "$log"
  done
done
