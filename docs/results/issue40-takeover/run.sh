#!/bin/sh
# Takeover, tidings beside JetStream, two rounds alternated. Run from the repository's root;
# TAKEOVER_TEST is the test binary of `cargo test -p tidings-cli --test takeover --no-run`.
for round in 1 2; do
  echo "== round $round jetstream (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  KILLS=10 bash bench/peers/jstakeover.sh 2>/dev/null
  echo "== round $round tidings (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  (cd crates/cli && TAKEOVER_KILLS=10 "$TAKEOVER_TEST" --ignored --nocapture takeover_times 2>&1 | grep -E "^kill [0-9]+:|takeover,|test result")
done
echo "== end (load: $(cut -d' ' -f1-3 /proc/loadavg))"
