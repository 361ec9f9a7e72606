#!/usr/bin/python3
"""The planner's plans, checked by the independent verifier and the schema.

    check_planner.py AUTOVM_PLAN AUTOVM_INSPECT

Writes a chain of convolutions (tools/gen_chain.py), plans it with no budget, the smallest
budget ('min') and 60% of its peak, with SGD and Adam, with and without recomputation; every
plan must pass `autovm-inspect verify`, match schemas/plan.schema.json (when Python's
jsonschema is installed) and go through summary, timeline, trace and svg. Skips (exit 77)
without Python's onnx, which gen_chain.py needs.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"FAILED: {what}: exit {p.returncode}\n$ {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    return p.stdout


def main() -> int:
    planner, inspect = sys.argv[1], sys.argv[2]
    if importlib.util.find_spec("onnx") is None:
        print("skipped: Python's onnx is not installed (tools/gen_chain.py needs it)")
        return 77
    has_jsonschema = importlib.util.find_spec("jsonschema") is not None
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "chain.onnx")
        run([sys.executable, os.path.join(ROOT, "tools", "gen_chain.py"), "12", model], "gen_chain.py")
        base = os.path.join(d, "base.json")
        run([planner, model, "--batch", "4", "-o", base, "--quiet"], "plan without a budget")
        with open(base, encoding="utf-8") as f:
            peak = json.load(f)["statistics"]["peak_bytes"]
        configs = [[]]
        for optimizer in ("sgd", "adam"):
            for budget in ("min", f"{int(peak * 0.6)}B"):
                configs.append(["--optimizer", optimizer, "--budget", budget])
        configs.append(["--budget", f"{int(peak * 0.6)}B", "--no-recompute"])
        plans = []
        for i, extra in enumerate(configs):
            path = os.path.join(d, f"plan{i}.json")
            run([planner, model, "--batch", "4", "-o", path, "--quiet"] + extra, f"plan {extra}")
            plans.append(path)
            out = run([inspect, "verify", path], f"verify of the plan for {extra}")
            print(out.strip())
            run([inspect, "summary", path], "summary")
            run([inspect, "timeline", path], "timeline")
            run([inspect, "trace", path, "-o", os.path.join(d, "t.json")], "trace")
            run([inspect, "svg", path, "-o", os.path.join(d, "m.svg")], "svg")
        if has_jsonschema:
            print(run([sys.executable, os.path.join(HERE, "validate_schema.py")] + plans, "schema").strip())
        else:
            print("schema not checked: Python's jsonschema is not installed")
        print(run([inspect, "diff", plans[0], plans[1]], "diff").splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
