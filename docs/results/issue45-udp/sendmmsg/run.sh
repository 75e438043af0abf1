#!/bin/sh
# Issue 45 part 4, batched UDP sends: A (the merge base, a writer task per UDP client, a sendto
# per datagram) against B (this branch: one task sends every client's datagrams, sendmmsg),
# alternated repetition by repetition, each a fresh broker beside one spinning process, with
# `perf stat` on each broker for its send system calls, the packets it sends (net_dev_queue: the
# datagrams, and a few TCP segments) and its CPU time. From the worktree root:
#   A=PATH B=PATH sh docs/results/issue45-udp/sendmmsg/run.sh
# (run under `nice -n 19` on a shared machine; summary: python3 .../sendmmsg/summary.py OUT)
set -u
A=${A:?a release build of the merge base}
B=${B:?a release build of this branch}
OUT=${OUT:-docs/results/issue45-udp/sendmmsg}
REPS=${REPS:-3}
EVENTS='task-clock,net:net_dev_queue,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendmmsg'
mkdir -p "$OUT"
# Runs the bench with binary $1 into $OUT/$2, and perf stat on every broker it starts, in order.
run() {
  "$1" bench subscribers --transports udp --counts 10,1000 --reps 1 --busy 1 --out "$OUT/$2" > "$OUT/$2.log" 2>&1 &
  bench=$!
  seen=" "
  n=0
  while kill -0 "$bench" 2>/dev/null; do
    for p in $(pgrep -P "$bench"); do
      case "$seen" in *" $p "*) continue ;; esac
      # The spinning process is a shell; every other child is a broker.
      [ "$(cat /proc/$p/comm 2>/dev/null)" = sh ] && continue
      seen="$seen$p "
      n=$((n + 1))
      perf stat -x, -e "$EVENTS" -p "$p" -o "$OUT/$2-broker$n.perf" > /dev/null 2>&1 &
    done
    sleep 0.05
  done
  wait
}
for rep in $(seq 1 "$REPS"); do
  echo "rep $rep A: $(uptime)"
  run "$A" "a-busy-$rep"
  echo "rep $rep B: $(uptime)"
  run "$B" "b-busy-$rep"
done
echo "end: $(uptime)"
