#!/usr/bin/env bash
# Can the route between two nodes of a 3-node NATS cluster be cut (and healed) on
# its own, through a TCP proxy, while both keep their routes to the third node?
#
#   VARIANT=advertise ./routecut_smoke.sh   # the configuration that works (default)
#   VARIANT=naive     ./routecut_smoke.sh   # the same without cluster.advertise: gossip
#                                           # gives n2 a direct route to n3 past the proxy
#   VARIANT=allproxy  ./routecut_smoke.sh   # every route through its own proxy
#   POOL=-1 ./routecut_smoke.sh             # cluster.pool_size (default: the server's, 3)
#
# Topology (advertise, naive): n1 dials n2 and n3 directly, n2 dials n1 directly and
# n3 only through the proxy (tcpproxy.py, 127.0.0.1:P23 -> n3's route port), n3 dials
# n1 only. In the advertise variant n2 and n3 advertise a cluster address nobody
# listens on, so the route addresses the servers gossip to each other lead nowhere:
# the only way between n2 and n3 is the configured one through the proxy.
# allproxy: every node advertises a dead address; n1 dials n2 via P12 and n3 via P13,
# n2 dials n3 via P23, n3 dials n1 via P31 (JetStream refuses to start a clustered
# node without a configured route).
#
# Steps: check every route and message flow; stall the proxy (connections open,
# nothing forwarded): n2<->n3 messages stop, the others flow; heal. Cut the proxy (all
# its connections closed, new ones refused); check n2<->n3 has no route and no core
# message flow while n1<->n2 and n1<->n3 do; restart n1 and then n3 during the cut
# (new routes, so new gossip); check again; heal; check n2<->n3 comes back. Exit 0
# only if all held.
set -u
RUN_PREFIX=routecut
source "$(dirname "$0")/jsfail_cluster.sh"
VARIANT=${VARIANT:-advertise}
POOL=${POOL:-}
CHECK="python3 $HERE/routecheck.py"

alloc_ports 3
read -r P12 P13 P31 P23 DEAD1 DEAD2 DEAD3 <<<"$(free_ports 7 | tr '\n' ' ')"
pool=""
[[ -n $POOL ]] && pool="  pool_size: $POOL"
adv() { echo "  advertise: \"127.0.0.1:$1\""; }
case $VARIANT in
naive)
	write_conf 1 "127.0.0.1:${R[2]},127.0.0.1:${R[3]}" "$pool"
	write_conf 2 "127.0.0.1:${R[1]},127.0.0.1:$P23" "$pool"
	write_conf 3 "127.0.0.1:${R[1]}" "$pool"
	;;
advertise)
	write_conf 1 "127.0.0.1:${R[2]},127.0.0.1:${R[3]}" "$pool"
	write_conf 2 "127.0.0.1:${R[1]},127.0.0.1:$P23" "$(adv "$DEAD2")"$'\n'"$pool"
	write_conf 3 "127.0.0.1:${R[1]}" "$(adv "$DEAD3")"$'\n'"$pool"
	;;
allproxy)
	write_conf 1 "127.0.0.1:$P12,127.0.0.1:$P13" "$(adv "$DEAD1")"$'\n'"$pool"
	write_conf 2 "127.0.0.1:$P23" "$(adv "$DEAD2")"$'\n'"$pool"
	write_conf 3 "127.0.0.1:$P31" "$(adv "$DEAD3")"$'\n'"$pool"
	python3 "$HERE/tcpproxy.py" "$P12" "${R[2]}" >"$RUN/proxy12.log" 2>&1 &
	PIDS[proxy12]=$!
	python3 "$HERE/tcpproxy.py" "$P13" "${R[3]}" >"$RUN/proxy13.log" 2>&1 &
	PIDS[proxy13]=$!
	python3 "$HERE/tcpproxy.py" "$P31" "${R[1]}" >"$RUN/proxy31.log" 2>&1 &
	PIDS[proxy31]=$!
	;;
*) echo "unknown VARIANT $VARIANT"; exit 2 ;;
esac
log "variant $VARIANT, proxy :$P23 -> n3 route port :${R[3]}; configs:"
for k in 1 2 3; do echo "--- n$k.conf"; cat "$RUN/n$k.conf"; done

python3 "$HERE/tcpproxy.py" "$P23" "${R[3]}" >"$RUN/proxy.log" 2>&1 &
PIDS[proxy]=$!
for k in 1 2 3; do start_node $k; done
for k in 1 2 3; do wait_healthy $k 30 || exit 1; done
sleep 3

fails=0
expect() { # expect WHAT GOT WANT
	if [[ $2 == "$3" ]]; then log "ok   $1: $2"; else log "FAIL $1: $2 (want $3)"; fails=$((fails + 1)); fi
}
show_routes() {
	for k in 1 2 3; do log "n$k routes:"; $CHECK routes "${M[k]}"; done
}
flows() { # flows WANT_23: n1<->n2 and n1<->n3 must flow, n2<->n3 as WANT_23
	expect "n1->n2" "$($CHECK flow "${C[2]}" "${C[1]}")" delivered
	expect "n2->n1" "$($CHECK flow "${C[1]}" "${C[2]}")" delivered
	expect "n1->n3" "$($CHECK flow "${C[3]}" "${C[1]}")" delivered
	expect "n3->n1" "$($CHECK flow "${C[1]}" "${C[3]}")" delivered
	expect "n2->n3" "$($CHECK flow "${C[3]}" "${C[2]}")" "$1"
	expect "n3->n2" "$($CHECK flow "${C[2]}" "${C[3]}")" "$1"
}
# every route of n2 to n3 must be dialled by n2 to the proxy
via_proxy() {
	python3 - "${M[2]}" "$P23" <<'EOF'
import json, sys, urllib.request
routes = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/routez", timeout=5)).get("routes") or []
to3 = [r for r in routes if r.get("remote_name") == "n3"]
bad = [r for r in to3 if not (r.get("did_solicit") and r.get("port") == int(sys.argv[2]))]
print(len(bad), f"of {len(to3)} routes n2->n3 not dialled through the proxy")
EOF
}

log "== healthy cluster"
show_routes
expect "n2 peers" "$($CHECK peers "${M[2]}")" "n1 n3"
expect "n3 peers" "$($CHECK peers "${M[3]}")" "n1 n2"
log "$(via_proxy)"
expect "n2->n3 only via proxy" "$(via_proxy | awk '{print $1}')" 0
flows delivered

log "== stall n2-n3 (proxy keeps its connections, forwards nothing)"
kill -HUP "${PIDS[proxy]}"
sleep 1
expect "n2 peers" "$($CHECK peers "${M[2]}")" "n1 n3"
flows "not delivered"
log "== heal the stall"
kill -USR2 "${PIDS[proxy]}"
sleep 1
flows delivered

log "== cut n2-n3 (proxy closes its connections, refuses new ones)"
kill -USR1 "${PIDS[proxy]}"
sleep 3
show_routes
expect "n1 peers" "$($CHECK peers "${M[1]}")" "n2 n3"
expect "n2 peers" "$($CHECK peers "${M[2]}")" "n1"
expect "n3 peers" "$($CHECK peers "${M[3]}")" "n1"
flows "not delivered"

for k in 1 3; do
	log "== still cut: restart n$k (new routes, new gossip)"
	kill_node $k
	sleep 1
	start_node $k
	wait_healthy $k 30
	sleep 4
	expect "n2 peers" "$($CHECK peers "${M[2]}")" "n1"
	expect "n3 peers" "$($CHECK peers "${M[3]}")" "n1"
	flows "not delivered"
done

log "== heal"
kill -USR2 "${PIDS[proxy]}"
for _ in $(seq 100); do [[ $($CHECK peers "${M[2]}") == "n1 n3" ]] && break; sleep 0.1; done
sleep 1
show_routes
expect "n2 peers" "$($CHECK peers "${M[2]}")" "n1 n3"
expect "n3 peers" "$($CHECK peers "${M[3]}")" "n1 n2"
expect "n2->n3 only via proxy" "$(via_proxy | awk '{print $1}')" 0
flows delivered
log "proxy log:"; cat "$RUN/proxy.log"
log "variant $VARIANT: $fails failed checks (files in $RUN)"
[[ $fails == 0 ]]
