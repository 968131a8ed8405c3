#!/usr/bin/env python3
"""Summarise attention kernel timelines written by `attention_bench --timeline DIR`.

Each CSV holds one line per (KV head, work item) with its SM, block and start/end times
(%globaltimer ns). For every file this prints, as markdown:
  - the kernel span (first item start to last item end) and the timer's resolution;
  - when the blocks finish: quantiles of each block's last end, as a fraction of the span
    (the tail of unequal queues);
  - the gaps between consecutive items of a block (the kernel's claim of its next item);
  - SM occupancy over the span: the fraction of SM-time with 0, 1 and 2+ CTAs inside an item;
  - per item shape (query tile, writes_final): count, mean duration, and a least-squares fit
    duration = fixed + per_key * kv_tokens (the fixed part is the item's start-up and
    epilogue, the per-key part its streaming rate, as GB/s of one CTA at 512 bytes per key
    and head: head_dim 128, K and V, bf16);
  - per item shape, the mean phases of the item's first q pass (us): start to row positions
    known (its KV prologue is issued meanwhile), to its first KV stage landed, to the KV walk
    done, and the rest to the item's end (epilogue and any further passes).

Usage: scripts/timeline.py DIR_OR_CSV...
"""
import csv
import os
import sys
from collections import defaultdict


def load(path):
    with open(path) as f:
        return [{k: int(v) for k, v in row.items()} for row in csv.DictReader(f)]


def quantiles(values, qs):
    v = sorted(values)
    return [v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] for q in qs]


def fit(points):
    """Least squares y = a + b x; returns (a, b), b = 0 when x does not vary."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def summarise(path):
    rows = [r for r in load(path) if r["end_ns"] > 0]
    name = os.path.basename(path)[:-4]
    if not rows:
        print(f"### {name}: no records\n")
        return
    t0 = min(r["start_ns"] for r in rows)
    t1 = max(r["end_ns"] for r in rows)
    span = t1 - t0
    stamps = sorted({r["start_ns"] for r in rows} | {r["end_ns"] for r in rows})
    steps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
    resolution = min(steps) if steps else 0
    print(f"### {name}\n")
    print(f"- span {span / 1e3:.1f} us over {len(rows)} item runs, "
          f"{len({r['block'] for r in rows})} blocks on {len({r['sm'] for r in rows})} SMs; "
          f"timer step >= {resolution} ns")

    block_end = defaultdict(int)
    block_start = {}
    for r in rows:
        block_end[r["block"]] = max(block_end[r["block"]], r["end_ns"])
        block_start[r["block"]] = min(block_start.get(r["block"], r["start_ns"]), r["start_ns"])
    qs = [0.0, 0.1, 0.5, 0.9, 1.0]
    ends = quantiles([(e - t0) / span for e in block_end.values()], qs)
    starts = quantiles([(s - t0) / 1e3 for s in block_start.values()], qs)
    print("- block last end, fraction of span at quantiles 0/10/50/90/100 %: "
          + " / ".join(f"{e:.2f}" for e in ends))
    print("- block first start after the first, us, same quantiles: "
          + " / ".join(f"{s:.2f}" for s in starts))
    by_block = defaultdict(list)
    for r in rows:
        by_block[r["block"]].append((r["start_ns"], r["end_ns"]))
    gaps = []
    for runs in by_block.values():
        runs.sort()
        gaps += [(b[0] - a[1]) / 1e3 for a, b in zip(runs, runs[1:])]
    if gaps:
        print("- gap between a block's items (the next item's claim), us, same quantiles: "
              + " / ".join(f"{g:.2f}" for g in quantiles(gaps, qs)))

    # SM occupancy: sweep the item intervals of each SM.
    per_sm = defaultdict(list)
    for r in rows:
        per_sm[r["sm"]].append((r["start_ns"], 1))
        per_sm[r["sm"]].append((r["end_ns"], -1))
    time_at = defaultdict(int)
    for events in per_sm.values():
        events.sort()
        level, last = 0, t0
        for t, d in events:
            time_at[min(level, 2)] += t - last
            level, last = level + d, t
        time_at[0] += t1 - last
    num_sms = max(132, len(per_sm))
    total = span * num_sms
    time_at[0] += (num_sms - len(per_sm)) * span
    print(f"- SM-time with 0 / 1 / 2+ CTAs in an item ({num_sms} SMs): "
          + " / ".join(f"{time_at[k] / total:.2f}" for k in (0, 1, 2)))

    groups = defaultdict(list)
    for r in rows:
        groups[(r["tile_q"], r["writes_final"])].append(r)
    print("\n| tile_q | final | items | mean keys | mean us | fixed us | ns per key "
          "| GB/s per CTA |")
    print("|---|---|---|---|---|---|---|---|")
    for (tq, fin), items in sorted(groups.items()):
        pts = [(r["kv_tokens"], (r["end_ns"] - r["start_ns"])) for r in items]
        a, b = fit(pts)
        mean_keys = sum(x for x, _ in pts) / len(pts)
        mean_us = sum(y for _, y in pts) / len(pts) / 1e3
        gbps = 512 / b if b > 0 else float("nan")
        print(f"| {tq} | {fin} | {len(items)} | {mean_keys:.0f} | {mean_us:.2f} | {a / 1e3:.2f} | "
              f"{b:.2f} | {gbps:.1f} |")
    print()
    if "walk_done_ns" not in rows[0]:
        return
    print("| tile_q | final | items walked | to positions us | to first stage us | walk us "
          "| rest us |")
    print("|---|---|---|---|---|---|---|")
    for (tq, fin), items in sorted(groups.items()):
        walked = [r for r in items if r["first_stage_ns"] > 0]
        if not walked:
            continue
        marks = ("start_ns", "positions_ns", "first_stage_ns", "walk_done_ns", "end_ns")
        phases = [sum(r[b] - r[a] for r in walked) / len(walked) / 1e3
                  for a, b in zip(marks, marks[1:])]
        print(f"| {tq} | {fin} | {len(walked)} | " + " | ".join(f"{x:.2f}" for x in phases) + " |")
    print()


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    paths = []
    for a in argv[1:]:
        if os.path.isdir(a):
            paths += sorted(os.path.join(a, f) for f in os.listdir(a) if f.endswith(".csv"))
        else:
            paths.append(a)
    for p in paths:
        summarise(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
