import csv, glob, os, statistics, sys
root = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(root, "*-*-[0-9]/subscribers.csv"))):
    label = os.path.basename(os.path.dirname(path))[:-2]
    for r in csv.DictReader(open(path)):
        if r["source"] != "this session":
            continue
        key = (label, r["system"])
        rows.setdefault(key, []).append(r)
def med(rs, col):
    v = [float(r[col]) for r in rs if r.get(col) not in (None, "")]
    return statistics.median(v) if v else None
def rng(rs, col):
    v = [float(r[col]) for r in rs if r.get(col) not in (None, "")]
    return (min(v), max(v)) if v else None
cols = ["lost", "dropped_subscribers", "lossy_subscribers", "max_lost_per_subscriber", "told_lost", "unattributed", "broker_drops", "rcvbuf_errors", "mean_us", "p50_us", "p99_us", "busy_cores", "load_before", "load_after"]
for key in sorted(rows):
    rs = rows[key]
    print(key, len(rs), "reps")
    for c in cols:
        m = med(rs, c)
        if m is not None:
            print(f"   {c}: median {m:,.3f} range {rng(rs, c)} per rep {[r.get(c) for r in rs]}")
