#!/usr/bin/env python3
"""Checks a jsfail_smoke.sh run directory the way the failure experiment's checker
(crates/bench/src/experiments/failures/verify.rs) does: every acknowledged
(publisher, seq) of pub-*.jsonl must reach every sub-*.jsonl exactly once, at the
acknowledged tick, in each publisher's order.

usage: jsfail_check.py RUN_DIR     exit status 1 if any subscriber missed an acknowledged message
"""
import glob
import json
import os
import statistics
import sys


def lines(path):
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut short by a kill
    return out


def key(line):
    src = line.get("properties", line)
    if not isinstance(src.get("publisher"), str) or not isinstance(src.get("seq"), int):
        return None
    if not isinstance(line.get("tick"), int):
        return None
    return (src["publisher"], src["seq"]), line["tick"]


def verify(acked, got):
    want = dict(k for k in map(key, acked) if k)
    v = dict(acked=len(want), delivered=0, missing=0, duplicates=0, out_of_order=0, wrong_tick=0, unacked=0,
             redelivered=0)
    seen, last = set(), {}
    for line in got:
        k = key(line)
        if not k:
            continue
        (ident, tick) = k
        v["delivered"] += 1
        if line.get("redelivered", 0) > 0:
            v["redelivered"] += 1
        if ident in seen:
            v["duplicates"] += 1
            continue
        seen.add(ident)
        if ident not in want:
            v["unacked"] += 1
        elif want[ident] != tick:
            v["wrong_tick"] += 1
        prev = last.get(ident[0])
        last[ident[0]] = ident[1]
        if prev is not None and prev > ident[1]:
            v["out_of_order"] += 1
    v["missing"] = sum(1 for k in want if k not in seen)
    return v


def main():
    run = sys.argv[1]
    acked = []
    for p in sorted(glob.glob(os.path.join(run, "pub-*.jsonl"))):
        ls = lines(p)
        acked += ls
        retried = sum(1 for l in ls if l.get("attempts", 1) > 1)
        dup = sum(1 for l in ls if l.get("duplicate"))
        waits = sorted((l["acked_us"] - l["sent_us"]) / 1000 for l in ls)
        worst = waits[-1] if waits else float("nan")
        print(f"{os.path.basename(p)}: {len(ls)} acknowledged, {retried} after a retry, {dup} acknowledged as "
              f"duplicate; scheduled-send to ack: p50 {statistics.median(waits) if waits else float('nan'):.1f} ms, "
              f"max {worst:.0f} ms")
    ok = True
    for p in sorted(glob.glob(os.path.join(run, "sub-*.jsonl"))):
        got = lines(p)
        v = verify(acked, got)
        lat = sorted((l["received_us"] - l["sent_us"]) / 1000 for l in got if "received_us" in l)
        held = v["missing"] == 0 and v["duplicates"] == 0 and v["out_of_order"] == 0 and v["wrong_tick"] == 0
        ok = ok and v["missing"] == 0
        print(f"{os.path.basename(p)}: {v['acked']} acknowledged, {v['delivered']} delivered: {v['missing']} missing, "
              f"{v['duplicates']} duplicated ({v['redelivered']} deliveries flagged redelivered), "
              f"{v['out_of_order']} out of order, {v['wrong_tick']} at another tick, {v['unacked']} delivered "
              f"without an acknowledgement; latency p50 {statistics.median(lat) if lat else float('nan'):.1f} ms, "
              f"max {lat[-1] if lat else float('nan'):.0f} ms; exactly once in order: {held}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
