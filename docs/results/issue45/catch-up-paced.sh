#!/bin/bash
# The cursor's catch-up paced to each RATE (msg/s), `tidings bench catch-up --reps 3` a run,
# the load noted before and after (JOURNAL 2026-12-01 12:45).
# usage: catch-up-paced.sh TIDINGS_BINARY LOG RATE...
# then:  python3 catch-up-to-csv.py COMMIT LOG > rows.csv
set -e
bin=$1; log=$2; shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for rate in "$@"; do
  printf '[guaranteed]\ncatch_up_cursor = true\ncatch_up_rate = %s\n' "$rate" > "$dir/c$rate.toml"
  echo "== rate $rate start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> "$log"
  "$bin" bench catch-up --reps 3 --dir "$dir" --broker-config "$dir/c$rate.toml" 2>&1 | grep -E "rep [0-9]:|median" >> "$log"
  echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> "$log"
done
