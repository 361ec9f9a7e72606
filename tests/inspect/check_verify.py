#!/usr/bin/python3
"""Runs `autovm-inspect verify` on one plan and checks the outcome written by hand.

    check_verify.py INSPECT PLAN --expect valid
    check_verify.py INSPECT PLAN --expect RULE[,RULE...] [--tensor NAME] [--step N] [--budget SIZE]

RULE is 1-7 or 'structure'. The plan must fail with exactly these rules (exit 1), and when
--tensor / --step are given, a violation of the first rule must name that tensor / step, in the
JSON result and in the printed one.
"""

import argparse
import json
import subprocess
import sys


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("inspect")
    ap.add_argument("plan")
    ap.add_argument("--expect", required=True)
    ap.add_argument("--tensor")
    ap.add_argument("--step", type=int)
    ap.add_argument("--budget")
    args = ap.parse_args()
    extra = ["--budget", args.budget] if args.budget else []

    code, out, err = run([args.inspect, "verify", args.plan, "--json"] + extra)
    problems = []
    try:
        result = json.loads(out)
    except ValueError:
        print(f"verify --json printed no JSON (exit {code}):\n{out}{err}")
        return 1
    found = {k for k, v in result["violations_by_rule"].items() if v > 0}
    if args.expect == "valid":
        if code != 0 or not result["valid"] or found:
            problems.append(f"expected a valid plan, got exit {code} and violations of {sorted(found)}")
    else:
        expected = set(args.expect.split(","))
        if code != 1 or result["valid"]:
            problems.append(f"expected exit 1 (invalid), got {code}")
        if found != expected:
            problems.append(f"expected violations of {sorted(expected)}, got {sorted(found)}")
        first = args.expect.split(",")[0]
        rule = 0 if first == "structure" else int(first)
        mine = [v for v in result["violations"] if v["rule"] == rule]
        if args.tensor and not any(v["tensor_name"] == args.tensor for v in mine):
            problems.append(f"no violation of {first} names tensor '{args.tensor}': {mine}")
        if args.step is not None and not any(v["step"] == args.step for v in mine):
            problems.append(f"no violation of {first} names step {args.step}: {mine}")

    # The printed result says the same, naming rule, step and tensor.
    tcode, text, terr = run([args.inspect, "verify", args.plan] + extra)
    if tcode != code:
        problems.append(f"verify exits {tcode} in text, {code} in JSON")
    if args.expect != "valid":
        label = "structure" if args.expect.split(",")[0] == "structure" else f"rule {args.expect.split(',')[0]}"
        lines = [l for l in text.splitlines() if l.strip().startswith(label)]
        if not lines:
            problems.append(f"no printed violation starts with '{label}':\n{text}")
        if args.tensor and not any(f"tensor '{args.tensor}'" in l for l in lines):
            problems.append(f"no printed violation of {label} names tensor '{args.tensor}':\n{text}")
        if args.step is not None and not any(f"step {args.step} (" in l for l in lines):
            problems.append(f"no printed violation of {label} names step {args.step}:\n{text}")
    elif "valid" not in text:
        problems.append(f"the printed result does not say valid:\n{text}")

    for p in problems:
        print(f"{args.plan}: {p}")
    if problems:
        print(f"--- verify printed:\n{text}{terr}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
