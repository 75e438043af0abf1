#!/usr/bin/env bash
# JetStream's takeover beside tidings' (issue 40): a 3-node nats-server cluster on loopback,
# stream TAKEOVER (file storage, R3, sync_interval always), one synchronous publisher
# (`peerbench -mode jspub`, every node in its server list, RATE msg/s) and KILLS SIGKILLs of
# the stream's leader, each followed by a restart on its store. Per kill: the time from the
# SIGKILL to the first acknowledgement received more than 2 ms after it (an acknowledgement the
# dead leader sent just before the kill, still in flight, does not count), i.e. taken by the
# new leader. The same measure as tidings' `takeover_times` (crates/cli/tests/takeover.rs:
# 50 msg/s, the leader SIGKILLed, restarted and caught up before the next kill). A publish not
# acknowledged within PUB_TIMEOUT (100 ms) is sent again, so the client adds at most that much.
#
#   NATS=path/to/nats-server KILLS=10 ./jstakeover.sh      # CSV on stdout: kill,leader,took_ms
set -u
RUN_PREFIX=jstakeover
source "$(dirname "$0")/jsfail_cluster.sh"

KILLS=${KILLS:-10} RATE=${RATE:-50} PER_KILL=${PER_KILL:-10}
COUNT=$((RATE * (10 + PER_KILL * KILLS)))

start_full_mesh_3 >&2 || exit 1
ALL="$(url 1),$(url 2),$(url 3)"

# leader: creates or updates the stream, waits until it has a leader and every other replica
# is current, and prints the leader's node number.
leader() {
	"$PEERBENCH" -mode jsstream -pub "$ALL" -stream TAKEOVER -topic 'takeover.>' -replicas 3 -dur 60s \
		2>>"$RUN/stream.log" | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"].lstrip("n"))'
}
leader >/dev/null || { cat "$RUN/stream.log" >&2; exit 1; }

"$PEERBENCH" -mode jspub -pub "$ALL" -stream TAKEOVER -topic takeover.a -publisher a \
	-count "$COUNT" -rate "$RATE" -size 100 -pub-timeout "${PUB_TIMEOUT:-100ms}" -dur $((COUNT / RATE + 120))s >"$RUN/pub.jsonl" 2>"$RUN/pub.log" &
PIDS[pub]=$!
for _ in $(seq 200); do [[ $(wc -l <"$RUN/pub.jsonl") -ge 20 ]] && break; sleep 0.1; done

# first_ack_after KILL_US: ms from KILL_US to the first acknowledgement received more than
# 2 ms after it (polls for at most 30 s; empty if none came).
first_ack_after() {
	python3 - "$RUN/pub.jsonl" "$1" <<'PY'
import json, sys, time
path, kill = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 30
while time.time() < deadline:
    for line in open(path):
        try:
            acked = json.loads(line)["acked_us"]
        except (ValueError, KeyError):
            continue
        if acked > kill + 2000:
            print(f"{(acked - kill) / 1000:.1f}")
            sys.exit(0)
    time.sleep(0.02)
PY
}

echo "kill,leader,took_ms"
for ((i = 1; i <= KILLS; i++)); do
	k=$(leader) || { log "no stream leader"; exit 1; }
	kill_us=$(date +%s%6N)
	kill_node "$k" >&2
	took=$(first_ack_after "$kill_us")
	echo "$i,n$k,${took:-none}"
	start_node "$k" >&2
	wait_healthy "$k" 60 || exit 1
done
kill "${PIDS[pub]}" 2>/dev/null
