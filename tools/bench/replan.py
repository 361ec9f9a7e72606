#!/usr/bin/env python3
"""Plans again, with this build's autovm-plan, what an existing plan was made for: the same model,
options, budget, and the step times and trainer reserve the plan was made with (its
steps[].compute_us and steps[].reserve_bytes, written to files for --step-times and --reserve),
so that a plan made elsewhere (pytorch_compare.py --make-plans, say) can be compared with
today's planner, or explained (--explain-bound).

usage: replan.py PLAN.json MODEL.onnx [-o NEW.json] [--planner AUTOVM_PLAN] [-- EXTRA ARGS...]

Prints the autovm-plan command it ran, then the old and the new plan's predicted step time and
lower bound. EXTRA ARGS go to autovm-plan (e.g. -- --explain-bound). MODEL must be the model
the plan was made from: autovm-plan checks nothing against the old plan, but a step count that
differs from the plan's is an error (the step times would not fit). Exit status: autovm-plan's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def command(plan, model, planner, times_path, reserve_path, out):
    o = plan["options"]
    cmd = [planner, model, "--batch", str(o["batch"]), "--optimizer", o["optimizer"],
           "--budget", f"{o['budget_bytes']}B", "--device", o["device"],
           "--workspace-limit", f"{o['conv_workspace_limit_bytes']}B",
           "--step-times", times_path, "--reserve", reserve_path, "-o", out]
    if o.get("mechanism"):
        cmd += ["--mechanism", o["mechanism"]]
    if not o.get("recompute", True):
        cmd.append("--no-recompute")
    elif o.get("recompute_ops"):
        cmd += ["--recompute-ops", ",".join(o["recompute_ops"])]
    if o.get("movable"):
        mov = o["movable"]
        cmd += ["--movable", mov if isinstance(mov, str) else ",".join(mov)]
    if o.get("pool_indices"):
        cmd.append("--pool-indices")
    return cmd


def summary(plan):
    p = plan["statistics"]["prediction"]
    return f"predicted {p['step_time_us'] / 1e3:.1f} ms, bound {p['bound_us'] / 1e3:.1f} ms"


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", metavar="PLAN.json")
    ap.add_argument("model", metavar="MODEL.onnx")
    ap.add_argument("-o", dest="out", help="write the new plan here (default: a temporary file)")
    ap.add_argument("--planner", default=os.environ.get(
        "AUTOVM_PLAN", os.path.join(ROOT, "build", "compiler", "driver", "autovm-plan")))
    a = ap.parse_args(argv)
    plan = json.load(open(a.plan))
    if plan["options"].get("data_parallel"):
        sys.exit("replan.py: data-parallel plans are not supported")
    with tempfile.TemporaryDirectory() as tmp:
        times = os.path.join(tmp, "step_times.json")
        reserve = os.path.join(tmp, "reserve.json")
        json.dump({"step_us": [s["compute_us"] for s in plan["steps"]]}, open(times, "w"))
        json.dump({"step_bytes": [s.get("reserve_bytes", 0) for s in plan["steps"]]}, open(reserve, "w"))
        out = a.out or os.path.join(tmp, "new.json")
        cmd = command(plan, a.model, a.planner, times, reserve, out) + extra
        print(" ".join(cmd), flush=True)
        r = subprocess.run(cmd)
        if r.returncode != 0:
            return r.returncode
        new = json.load(open(out))
    print(f"old: {summary(plan)}\nnew: {summary(new)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
