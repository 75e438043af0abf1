"""Medians [min-max] over the repetitions of run.sh: losses, latency, and per broker the send
system calls and CPU time per delivery. Usage: python3 summary.py DIR"""
import csv, glob, os, statistics, sys

root = sys.argv[1]

def perf(path):
    counts = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) < 3 or line.startswith("#") or not f[0].replace(".", "").isdigit():
            continue
        counts[f[2].split(":")[-1]] = float(f[0])
    return counts

rows = {}
for path in sorted(glob.glob(os.path.join(root, "[ab]-busy-[0-9]*/subscribers.csv"))):
    run = os.path.basename(os.path.dirname(path))
    side = run[0]
    brokers = sorted(glob.glob(os.path.join(root, run + "-broker*.perf")))
    for i, r in enumerate(r for r in csv.DictReader(open(path)) if r["source"] == "this session"):
        p = perf(brokers[i]) if i < len(brokers) else {}
        received = float(r["received"])
        calls = sum(p.get(k, 0) for k in ("sys_enter_sendto", "sys_enter_sendmsg", "sys_enter_sendmmsg"))
        r["send_calls"] = calls
        r["calls_per_delivery"] = calls / received if received and p else ""
        r["sendmmsg"] = p.get("sys_enter_sendmmsg", "")
        r["packets_per_delivery"] = p["net_dev_queue"] / received if received and "net_dev_queue" in p else ""
        r["broker_cpu_ms"] = p.get("task-clock", "")
        r["cpu_us_per_delivery"] = 1000 * p["task-clock"] / received if received and "task-clock" in p else ""
        rows.setdefault((int(r["subscribers"]), side), []).append(r)

cols = ["lost", "lossy_subscribers", "max_lost_per_subscriber", "dropped_subscribers", "unattributed", "broker_drops",
        "rcvbuf_errors", "p50_us", "p99_us", "mean_us", "calls_per_delivery", "sendmmsg", "packets_per_delivery", "broker_cpu_ms",
        "cpu_us_per_delivery", "busy_cores", "load_before"]
for key in sorted(rows):
    rs = rows[key]
    print(f"{key[0]} subscribers, {'A (base)' if key[1] == 'a' else 'B (sendmmsg)'}: {len(rs)} reps")
    for c in cols:
        v = [float(r[c]) for r in rs if r.get(c) not in (None, "")]
        if v:
            print(f"   {c}: median {statistics.median(v):,.3f} [{min(v):,.3f}-{max(v):,.3f}] per rep {[round(x, 3) for x in v]}")
