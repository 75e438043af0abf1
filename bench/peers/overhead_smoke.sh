#!/usr/bin/env bash
# Smoke test of peerbench -mode overhead on a 2-node nats-server 2.15.2 cluster on
# loopback, JetStream on both nodes with `sync_interval: always`. Node A (n1, tag
# overhead:a, so the R1 stream OVERHEAD is placed there) has the publisher and the
# local subscribers, node B (n2) the remote ones.
#
#   ./overhead_smoke.sh                      # SUBS="100 1000", both modes, DUR=5s
#   SUBS="100" DUR=3s ./overhead_smoke.sh
#
# Rows are appended to $RUN/overhead.csv and printed; beside them the CPU time
# (utime+stime from /proc/PID/stat) of node A and node B between the harness's ready
# line and its result line, as % of one core.
set -u
RUN_PREFIX=overhead
source "$(dirname "$0")/jsfail_cluster.sh"
SUBS=${SUBS:-100 1000} DUR=${DUR:-5s} RATE=${RATE:-2000} SIZE=${SIZE:-250} GROUPS_N=${GROUPS_N:-1000}

alloc_ports 2
write_conf 1 "127.0.0.1:${R[2]}" "" 'server_tags: ["overhead:a"]'
write_conf 2 "127.0.0.1:${R[1]}" "" 'server_tags: ["overhead:b"]'
for k in 1 2; do start_node $k; done
for k in 1 2; do wait_healthy $k 30 || exit 1; done

cpu() { # cpu PID...: utime+stime in clock ticks, one number per PID
	for pid in "$@"; do awk '{print $14 + $15}' "/proc/$pid/stat"; done
}
# lines FILE N SECONDS: waits until FILE has N lines
lines() {
	for ((t = 0; t < $3 * 100; t++)); do
		[[ -f $1 && $(wc -l <"$1") -ge $2 ]] && return 0
		kill -0 "${PIDS[ovh]}" 2>/dev/null || return 1
		sleep 0.01
	done
	return 1
}
# fsync_rate: appends of 256 B + fsync per second on the stores' filesystem, for 0.5 s
# (context for the JetStream rows: with sync_interval always the disk is the limit)
fsync_rate() {
	python3 - "$RUN" <<'PY'
import os, sys, time
fn = os.path.join(sys.argv[1], "fsync.probe")
fd = os.open(fn, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
n, t = 0, time.perf_counter()
while time.perf_counter() - t < 0.5:
    os.write(fd, b"x" * 256); os.fsync(fd); n += 1
print(f"{n / (time.perf_counter() - t):.0f}")
os.close(fd); os.remove(fn)
PY
}
status=0
for n in $SUBS; do
	for js in false true; do
		out="$RUN/overhead-$n-$js.jsonl"
		disk="disk $(fsync_rate) fsync/s, load $(cut -d' ' -f1 /proc/loadavg)"
		"$PEERBENCH" -mode overhead -js=$js -pub "$(url 1)" -sub "$(url 2)" -subs "$n" -local 10 \
			-groups "$GROUPS_N" -rate "$RATE" -size "$SIZE" -dur "$DUR" -drain 60s -place-tag overhead:a \
			-csv "$RUN/overhead.csv" >"$out" 2>"$RUN/overhead-$n-$js.log" </dev/null &
		PIDS[ovh]=$!
		cpu_note="no CPU figures (no ready or result line)"
		if lines "$out" 1 120; then
			read -r a0 b0 <<<"$(cpu "${PIDS[n1]}" "${PIDS[n2]}" | tr '\n' ' ')"
			t0=$(date +%s%N)
			if lines "$out" 2 300; then
				read -r a1 b1 <<<"$(cpu "${PIDS[n1]}" "${PIDS[n2]}" | tr '\n' ' ')"
				ms=$((($(date +%s%N) - t0) / 1000000))
				pc() { echo "$((($2 - $1) * 10 * 100 / ms))%"; } # ticks are 10 ms
				cpu_note="CPU from ready to result ($ms ms): A $(pc "$a0" "$a1"), B $(pc "$b0" "$b1")"
			fi
		fi
		wait_pid ovh 300; rc=$?
		log "subs=$n js=$js exit $rc; $cpu_note; before the run: $disk"
		grep -v '^#' "$RUN/overhead-$n-$js.log" | tail -3
		[[ $rc == 0 ]] || status=1
	done
done
column -s, -t <"$RUN/overhead.csv"
log "files in $RUN"
exit $status
