#!/bin/bash
# The login flood, broker binaries alternated rep by rep. TEST: the login_flood test binary
# (cargo test -p tidings-cli --test login_flood --no-run prints it); BIN_DIR: release builds named
# tidings-SIDE; VPS: verify_per_second (unset: the broker default, 50). Run it with the other
# work on the machine paused.
for i in $(seq ${REPS:-3}); do
 for b in ${SIDES:-base idle}; do
  echo "== $b rep $i $(uptime)"
  env ${VPS:+TIDINGS_FLOOD_VERIFY_PER_SECOND=$VPS} TIDINGS_FLOOD_BROKER="$BIN_DIR/tidings-$b" "$TEST" --ignored --nocapture login_flood_measurement 2>&1 | grep -E "login flood:|test result|panicked"
 done
done
