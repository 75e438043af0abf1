"""Turns the logs of run.sh and ab.sh into CSV (one row per repetition, or per run's medians)."""
import csv, re, sys

def reps(log, out):
    rows, point = [], None
    for line in open(log):
        m = re.match(r"== (tput|latency) (.*) \(load", line)
        if m:
            point = f"{m.group(1)} {m.group(2)}"
            continue
        m = re.match(r"\s+(tidings|nats) rep (\d+): (.*) \(load ([\d.]+) -> ([\d.]+)\)", line)
        if m and point:
            figures = dict(kv.split(" ", 1) for kv in m.group(3).split(", "))
            rows.append({"point": point, "side": m.group(1), "rep": m.group(2), "load_before": m.group(4),
                         "load_after": m.group(5), **figures})
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(rows)

def medians(log, out):
    rows, run = [], None
    for line in open(log):
        m = re.match(r"== round (\d+) (old|new) \(load: ([\d.]+)", line)
        if m:
            run = m.groups()
            continue
        m = re.match(r"latency .* (tidings|nats): (.*)", line)
        if m and run:
            fig = {k: v.split(" ")[0] for k, v in (kv.split(" ", 1) for kv in re.split(r", (?=[a-z_0-9]+ )", m.group(2)))}
            rows.append({"round": run[0], "build": run[1], "load_before": run[2], "side": m.group(1),
                         "p50_us": fig["p50_us"], "p99_us": fig["p99_us"], "send_p99_us": fig["send_p99_us"]})
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)

reps(sys.argv[1], sys.argv[2])
medians(sys.argv[3], sys.argv[4])
