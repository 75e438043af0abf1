# Sourced by jsfail_smoke.sh and routecut_smoke.sh: a NATS cluster of nats-server
# 2.15.2 on loopback for the JetStream failure experiments. Every process started
# here is recorded in PIDS and stopped by its PID in cleanup.
#
# Per node N (1-based): client port C[N], route port R[N], monitoring port M[N],
# config $RUN/nN.conf, store $RUN/nN/, log $RUN/nN.log.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NATS=${NATS:-$HERE/bin/nats-server}
PEERBENCH=${PEERBENCH:-$HERE/bin/peerbench}
mkdir -p "$HERE/run"
RUN=$(mktemp -d "$HERE/run/${RUN_PREFIX:-jsfail}.XXXXXX")
declare -A PIDS   # name -> pid
declare -a C R M

log() { printf '%s %s\n' "$(date +%T.%3N)" "$*"; }

cleanup() {
	for name in "${!PIDS[@]}"; do
		local pid=${PIDS[$name]}
		if kill -0 "$pid" 2>/dev/null; then
			kill -CONT "$pid" 2>/dev/null
			kill "$pid" 2>/dev/null
		fi
	done
	for name in "${!PIDS[@]}"; do
		local pid=${PIDS[$name]}
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
	done
	return 0
}
trap cleanup EXIT

# free_ports N: N distinct free TCP ports on 127.0.0.1, one per line.
free_ports() {
	python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# alloc_ports NODES: fills C, R, M for nodes 1..NODES.
alloc_ports() {
	local n=$1 i=0
	local ports=($(free_ports $((3 * n))))
	for ((k = 1; k <= n; k++)); do
		C[k]=${ports[i++]}; R[k]=${ports[i++]}; M[k]=${ports[i++]}
	done
}

# write_conf NODE ROUTES [EXTRA [TOP]]: the node's config; ROUTES a comma-separated list
# of host:port the node dials; EXTRA more lines of the cluster block, TOP more
# top-level lines (server_tags, ...). SYNC_INTERVAL
# (default always: fsync before acknowledging) is the jetstream sync_interval; set
# it empty for the server's default (background fsync every 2 minutes).
SYNC_INTERVAL=${SYNC_INTERVAL-always}
write_conf() {
	local k=$1 routes=$2 extra=${3:-} top=${4:-}
	local list="" sync=""
	[[ -n $SYNC_INTERVAL ]] && sync="  sync_interval: $SYNC_INTERVAL"
	IFS=, read -ra rs <<<"$routes"
	for r in "${rs[@]}"; do list+="    nats-route://$r"$'\n'; done
	cat >"$RUN/n$k.conf" <<EOF
server_name: n$k
listen: 127.0.0.1:${C[k]}
http: 127.0.0.1:${M[k]}
$top
jetstream {
  store_dir: "$RUN/n$k"
$sync
}
cluster {
  name: jsfail
  listen: 127.0.0.1:${R[k]}
  routes: [
$list  ]
$extra
}
EOF
}

start_node() { # start_node NODE
	local k=$1
	"$NATS" -c "$RUN/n$k.conf" >>"$RUN/n$k.log" 2>&1 &
	PIDS[n$k]=$!
	log "n$k started (pid ${PIDS[n$k]}, client ${C[k]}, route ${R[k]}, monitor ${M[k]})"
}

kill_node() { # kill_node NODE: SIGKILL
	local k=$1
	kill -9 "${PIDS[n$k]}" 2>/dev/null
	wait "${PIDS[n$k]}" 2>/dev/null
	log "n$k killed (SIGKILL)"
}

# wait_healthy NODE SECONDS: until /healthz says ok (JetStream up and current).
wait_healthy() {
	local k=$1 secs=$2
	for ((t = 0; t < secs * 10; t++)); do
		curl -sf "http://127.0.0.1:${M[k]}/healthz" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	log "n$k not healthy after ${secs}s"
	return 1
}

# start_full_mesh_3: three nodes, each routed to the other two, started and healthy.
start_full_mesh_3() {
	alloc_ports 3
	local k j routes
	for k in 1 2 3; do
		routes=""
		for j in 1 2 3; do [[ $j != "$k" ]] && routes+="${routes:+,}127.0.0.1:${R[j]}"; done
		write_conf $k "$routes"
	done
	for k in 1 2 3; do start_node $k; done
	for k in 1 2 3; do wait_healthy $k 30 || return 1; done
}

url() { echo "nats://127.0.0.1:${C[$1]}"; }

# wait_line FILE PATTERN SECONDS
wait_line() {
	for ((t = 0; t < $3 * 10; t++)); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# wait_pid NAME SECONDS: waits for a client to exit; its status, or 124 after SECONDS.
wait_pid() {
	local pid=${PIDS[$1]}
	for ((t = 0; t < $2 * 10; t++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid"
			return $?
		fi
		sleep 0.1
	done
	return 124
}
