#!/usr/bin/env bash
# Smoke test of the JetStream failure clients (peerbench -mode jsstream|jspub|jssub)
# against a 3-node nats-server 2.15.2 cluster on loopback, with the faults of the
# failure experiment done by hand: SIGKILL of a node that has no publisher, restart
# on its store after DOWN seconds, then the same for the publishers' node.
#
#   ./jsfail_smoke.sh            # then read the verdict printed by jsfail_check.py
#
# Setup: 3 nodes, each with its own store dir under a mktemp dir in run/ (kept for
# inspection), `sync_interval: always` (fsync before the acknowledgement); stream
# FAILURES on failures.>, file storage, R3, 2-minute duplicate window; durable pull
# consumers s1 (client list n2,n3,n1) and s2 (n3,n1,n2); PUBS publishers at RATE
# msg/s of SIZE B for SECS s, all with client list n1,n2,n3 (so all on n1).
set -u
RUN_PREFIX=jsfail
source "$(dirname "$0")/jsfail_cluster.sh"

PUBS=${PUBS:-4} RATE=${RATE:-25} SIZE=${SIZE:-100} SECS=${SECS:-30} DOWN=${DOWN:-5}
COUNT=$((RATE * SECS))

start_full_mesh_3 || exit 1
log "varz jetstream config of n1: $(curl -s "http://127.0.0.1:${M[1]}/varz" | python3 -c 'import json,sys; print(json.load(sys.stdin)["jetstream"]["config"])')"

ALL="$(url 1),$(url 2),$(url 3)"
"$PEERBENCH" -mode jsstream -pub "$ALL" -stream FAILURES -topic 'failures.>' -replicas 3 -dur 30s \
	>"$RUN/stream.json" 2>"$RUN/stream.log" || { cat "$RUN/stream.log"; exit 1; }
log "stream: $(cat "$RUN/stream.json")"

start_sub() { # start_sub NAME SERVERS
	"$PEERBENCH" -mode jssub -sub "$2" -stream FAILURES -durable "$1" -topic 'failures.>' \
		-count $((PUBS * COUNT)) -dur $((SECS + 90))s >"$RUN/sub-$1.jsonl" 2>"$RUN/sub-$1.log" &
	PIDS[sub-$1]=$!
}
start_sub s1 "$(url 2),$(url 3),$(url 1)"
start_sub s2 "$(url 3),$(url 1),$(url 2)"
for s in s1 s2; do
	wait_line "$RUN/sub-$s.jsonl" '"ready":true' 30 || { log "$s not ready"; cat "$RUN/sub-$s.log"; exit 1; }
	log "$s: $(head -1 "$RUN/sub-$s.jsonl")"
done

for p in $(seq 1 "$PUBS"); do
	id=f$p
	"$PEERBENCH" -mode jspub -pub "$ALL" -stream FAILURES -topic "failures.$id" -publisher "$id" \
		-count "$COUNT" -rate "$RATE" -size "$SIZE" -dur $((SECS + 60))s >"$RUN/pub-$id.jsonl" 2>"$RUN/pub-$id.log" &
	PIDS[pub-$id]=$!
done
log "$PUBS publishers started: $COUNT messages each at $RATE msg/s"

if [[ ${SYNC_CHECK:-0} == 1 ]]; then
	# Is sync_interval: always honoured? Count the fsyncs of the stream's leader and of
	# one follower for 3 s against the acknowledgements in that time (strace slows
	# the two servers a little; off by default).
	leader=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["leader"])' "$RUN/stream.json")
	follower=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peers"][0]["name"])' "$RUN/stream.json")
	acks() { cat "$RUN"/pub-*.jsonl | wc -l; }
	a0=$(acks)
	timeout -s INT 3 strace -q -f -c -e trace=fsync,fdatasync -p "${PIDS[$leader]}" -o "$RUN/strace.$leader" &
	s1=$!
	timeout -s INT 3 strace -q -f -c -e trace=fsync,fdatasync -p "${PIDS[$follower]}" -o "$RUN/strace.$follower" &
	s2=$!
	wait $s1 $s2
	log "sync check: $(($(acks) - a0)) acknowledgements in 3 s; fsync calls: leader $leader" \
		"$(awk '$NF=="total"{print $4}' "$RUN/strace.$leader"), follower $follower" \
		"$(awk '$NF=="total"{print $4}' "$RUN/strace.$follower")"
	sleep 1
else
	sleep 5
fi
kill_node 3
sleep "$DOWN"
start_node 3
wait_healthy 3 30
sleep 3
kill_node 1
sleep "$DOWN"
start_node 1
wait_healthy 1 30

status=0
for p in $(seq 1 "$PUBS"); do
	wait_pid pub-f$p $((SECS + 70)); rc=$?
	log "pub-f$p exited $rc: $(wc -l <"$RUN/pub-f$p.jsonl") acknowledged; $(tail -1 "$RUN/pub-f$p.log")"
	[[ $rc == 0 ]] || status=1
done
for s in s1 s2; do
	wait_pid sub-$s 100; rc=$?
	log "sub-$s exited $rc: $(tail -1 "$RUN/sub-$s.log")"
	[[ $rc == 0 ]] || status=1
done
for k in 1 2 3; do
	log "n$k stream: $(curl -s "http://127.0.0.1:${M[k]}/jsz?streams=1" | python3 -c '
import json,sys
j=json.load(sys.stdin)
for a in j.get("account_details",[]):
    for s in a.get("stream_detail",[]):
        print(s["name"], s["state"]["messages"], "msgs, last seq", s["state"]["last_seq"], "leader", s.get("cluster",{}).get("leader"))')"
done
python3 "$HERE/jsfail_check.py" "$RUN" || status=1
log "files in $RUN"
exit $status
