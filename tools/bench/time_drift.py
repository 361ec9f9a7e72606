#!/usr/bin/env python3
"""Where a run under a plan falls behind the plan's prediction: reads a pytorch_compare.py
--trace-time result and the plan it ran, and prints, at each plan boundary the adapter timed
(a CUDA event when step `pos` ends, Attachment.time_trace), the measured time from the training
step's first mark against the plan's predicted end of that step (steps[].end_us): the sum of the
medians, over the timed training steps, of the time between two boundaries in a row. Lists the boundaries where the difference (the drift) moves by
more than --jump ms since the previous timed boundary, with the plan's stall and recompute
there; a wait the plan puts before step b can show at an earlier boundary when PyTorch's hooks
group several plan steps, so a rise followed by a fall of the same size is a wait that moved,
and what is left is time lost.

usage: time_drift.py RESULT.json PLAN.json [--model M] [--config C] [--jump MS]
"""
import argparse
import collections
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", metavar="RESULT.json", help="pytorch_compare.py --trace-time --out")
    ap.add_argument("plan", metavar="PLAN.json")
    ap.add_argument("--model", help="the result's model (default: the first with time rows)")
    ap.add_argument("--config", help="the result's configuration")
    ap.add_argument("--jump", type=float, default=0.5, metavar="MS")
    a = ap.parse_args()
    results = [r for r in json.load(open(a.result))["results"] if r.get("time_rows")
               and (a.model is None or r["model"] == a.model)
               and (a.config is None or r["config"] == a.config)]
    if not results:
        sys.exit("time_drift.py: no result with time rows (was the run made with --trace-time?)")
    r = results[0]
    plan = json.load(open(a.plan))
    steps = plan["steps"]
    n = len(steps)
    marks = collections.defaultdict(lambda: collections.defaultdict(list))
    for row in r["time_rows"]:
        marks[row["step"]][row["pos"]].append(row["us"])
    # The boundaries every timed training step has, and between each two in a row the median
    # over the training steps of the time between them (robust to one step's hiccup).
    common = sorted(set.intersection(*(set(p for p in m if -1 <= p < n) for m in marks.values())))
    at = {}
    for lo, hi in zip(common, common[1:]):
        span = statistics.median(m[hi][0] - m[lo][0] for m in marks.values())
        at[hi] = at.get(lo, 0.0) + span
    recomputes = collections.Counter(x["ready_before_step"] for x in plan["actions"]
                                     if x["kind"] == "recompute")
    print(f"{r['model']} {r['config']}: {len(marks)} training steps timed, {len(at)} boundaries; "
          f"predicted {plan['statistics']['prediction']['step_time_us'] / 1e3:.1f} ms")
    print(f"{'steps':>11} {'node':<44} {'drift ms':>8} {'change':>7} {'plan stall':>10} {'recomputes':>10}")
    prev = None
    for pos in sorted(at):
        drift = (at[pos] - steps[pos]["end_us"]) / 1e3
        if prev is not None and abs(drift - prev[1]) > a.jump:
            lo = prev[0]
            stall = sum(steps[k]["stall_us"] for k in range(lo + 1, pos + 1)) / 1e3
            rc = sum(recomputes[k] for k in range(lo + 1, pos + 1))
            print(f"{f'({lo}, {pos}]':>11} {steps[pos]['node'][-44:]:<44} {drift:8.1f} "
                  f"{drift - prev[1]:+7.1f} {stall:10.1f} {rc:10d}")
        prev = (pos, drift)
    if prev:
        print(f"at the last timed boundary (step {prev[0]}): drift {prev[1]:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
