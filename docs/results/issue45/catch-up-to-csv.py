import re, sys
# usage: to_csv.py COMMIT LOG... -> CSV of every repetition
print("pair,mode,commit,utc_start,rep,catchup_msg_s,alone_p50_us,alone_p99_us,during_p50_us,during_p99_us,live_during,load_before,load_after")
commit = sys.argv[1]
for path in sys.argv[2:]:
    pair = mode = start = None
    for line in open(path):
        m = re.match(r"== pair (\d+) mode (\S+) start (\S+)", line)
        if m: pair, mode, start = m.groups(); continue
        # catch-up-paced.sh: one run per line `== rate R start T`, the cursor paced to R msg/s
        m = re.match(r"== rate (\d+) start (\S+)", line)
        if m: pair, mode, start = str(int(pair or 0) + 1), "cursor@" + m.group(1), m.group(2); continue
        m = re.search(r"rep (\d+): (.*) \(load ([\d.]+) -> ([\d.]+)\)", line)
        if m:
            kv = dict(re.findall(r"(\w+) ([\d.]+)", m.group(2)))
            print(",".join([pair, mode, commit, start, m.group(1), kv["catchup_msg_s"], kv["alone_p50_us"], kv["alone_p99_us"],
                            kv["during_p50_us"], kv["during_p99_us"], kv["live_during"], m.group(3), m.group(4)]))
