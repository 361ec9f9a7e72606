#!/usr/bin/python3
"""Checks what autovm-inspect's subcommands print and write, on the plans in plans/.

    check_cli.py INSPECT CASE

CASE: summary, timeline, trace, svg, diff, exit_codes, read_remote (remote reads through every
subcommand, and the structure checks of read_remote actions), large (a 100,000-tensor plan
through verify, in well under the test timeout), random_arena (the arena sweep of rule 7 against
brute force on seeded random plans).
"""

import json
import os
import random
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
PLANS = os.path.join(HERE, "plans")
KINDS = ["input", "label", "parameter", "buffer", "gradient", "optimizer_state", "activation",
         "activation_grad", "workspace"]


class Failed(Exception):
    pass


def plan(name):
    return os.path.join(PLANS, name)


def run(*args, code=0):
    p = subprocess.run([INSPECT, *args], capture_output=True, text=True, timeout=120)
    if code is not None and p.returncode != code:
        raise Failed(f"autovm-inspect {' '.join(args)}: exit {p.returncode}, expected {code}\n"
                     f"{p.stdout}{p.stderr}")
    return p


def expect(cond, what):
    if not cond:
        raise Failed(what)


def contains(text, *parts):
    for part in parts:
        expect(part in text, f"expected {part!r} in:\n{text}")


def case_summary():
    out = run("summary", plan("valid_predicted.json")).stdout
    contains(out, "tiny.onnx", "budget     5.63 KB (5632 B)", "6.14 KB without the plan",
             "5.63 KB resident with it (step 1", "4.10 KB to host (3 evicts)",
             "4.10 KB to device (3 prefetches)", "predicted step 74 us", "1.10x no swap (67 us)",
             "1.09x the bound (68 us)", "h200-pcie", "demand_paging", "advise 1",
             "largest tensors off the GPU (2 of 2", "[2, 2] evict/prefetch")
    # A baseline's step time only where it is calibrated: no_swap's 67 us, not demand paging's.
    rows = {l.split()[0]: l for l in out.splitlines() if l.startswith("           ") and l.split()}
    expect("67 us" in rows.get("no_swap", "") and "95" not in rows.get("demand_paging", "-"),
           f"baseline step times:\n{out}")
    # a (2 KB) is listed before w (1 KB).
    expect(out.index("activation       a") < out.index("parameter        w"), f"not by bytes:\n{out}")
    # Without a prediction: said so; PLAN alone is the summary.
    out = run(plan("valid.json")).stdout
    contains(out, "not predicted", "evict 1, prefetch 1, discard 0, recompute 0, read_remote 0, advise 0")
    expect("\nremote " not in out, f"a plan without remote reads shows none:\n{out}")
    expect(out == run("summary", plan("valid.json")).stdout, "PLAN and summary PLAN differ")
    contains(run(plan("valid_recompute.json")).stdout, "[2, 2] discard/recompute")
    expect("workspace " not in out, f"a plan without measured workspaces says so:\n{out}")
    # Measured convolution workspaces (autovm-plan --conv-workspaces), one cut to fit.
    with open(plan("valid.json")) as f:
        doc = json.load(f)
    doc["options"]["conv_workspaces_measured"] = 3
    doc["options"]["conv_workspaces_cut"] = [
        {"entry": 1, "phase": "backward", "bytes": 512, "measured_bytes": 4096}]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "measured.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        contains(run(path).stdout, "3 convolutions' workspaces measured, 1 cut to fit the budget")


def plot_rows(out):
    """The rows of the plot: above the x-axis (the line labelled 0 B)."""
    lines = out.splitlines()
    axis = next(i for i, l in enumerate(lines) if l.startswith("      0 B "))
    return [l for l in lines[:axis] if l[10:11] in ("┤", "│", "+", "|")]


def case_timeline():
    out = run("timeline", plan("valid.json"), "--width", "50", "--height", "10").stdout
    contains(out, "budget 5.63 KB", "peak without the plan 6.14 KB", "█", "─", "┄", "forward",
             "backward", "resident peak 5.63 KB at step 1")
    rows = plot_rows(out)
    expect(len(rows) == 10, f"expected 10 rows of plot, got {len(rows)}:\n{out}")
    expect(all(len(r) >= 10 + 1 + 50 for r in rows), f"rows narrower than 50 columns:\n{out}")
    out = run("timeline", plan("rule2_over_budget.json"), "--ascii", "--width", "40").stdout
    expect(out.isascii(), f"--ascii printed non-ASCII:\n{out}")
    contains(out, "#", "budget 5.00 KB", "! over the budget")
    expect(len(plot_rows(out)) == 16, f"default height is not 16 rows:\n{out}")
    # More steps than columns: bucketed, the most of each bucket.
    out = run("timeline", plan("valid.json"), "--width", "10", "--ascii").stdout
    contains(out, "2.0 columns per step")
    run("timeline", plan("valid.json"), "--width", "3", code=2)


def load_trace(path):
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    expect(isinstance(trace.get("traceEvents"), list), "no traceEvents list")
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    for lane in ("compute", "copy to device", "copy to host", "recompute"):
        expect(lane in names.values(), f"no lane '{lane}': {names}")
    lanes = {}
    for e in trace["traceEvents"]:
        expect(e["pid"] == 1, f"pid is not 1: {e}")
        if e["ph"] == "X":
            expect(e["dur"] >= 0, f"negative duration: {e}")
            lanes.setdefault(names[e["tid"]], []).append(e)
    for lane, events in lanes.items():  # slices in one lane never overlap
        events.sort(key=lambda e: e["ts"])
        for x, y in zip(events, events[1:]):
            expect(x["ts"] + x["dur"] <= y["ts"] + 1e-9, f"lane {lane}: {x} overlaps {y}")
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "resident bytes"]
    return trace, lanes, counters


def case_trace():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.json")
        run("trace", plan("valid.json"), "-o", out)
        trace, lanes, counters = load_trace(out)
        expect(trace["otherData"]["timing"].startswith("assumed"), trace["otherData"])
        expect([e["name"] for e in lanes["compute"]] ==
               ["Mul", "Conv", "SoftmaxCrossEntropy", "MulGrad", "SGD"], lanes["compute"])
        expect([e["ts"] for e in lanes["compute"]] == [0, 100, 200, 300, 400], lanes["compute"])
        expect([e["name"] for e in lanes["copy to host"]] == ["a"], lanes)
        expect([e["name"] for e in lanes["copy to device"]] == ["a"], lanes)
        expect(len(counters) == 6, f"expected a counter per step and one at the end: {counters}")
        expect(sum(counters[1]["args"].values()) == 5632, counters[1])  # step 1: the resident peak
        expect(sum(counters[2]["args"].values()) == 6144 - 2048, counters[2])  # a is off at step 2
        with open(out, "rb") as f:
            first = f.read()
        run("trace", plan("valid.json"), "-o", out)
        with open(out, "rb") as f:
            expect(f.read() == first, "trace output differs between two runs")
        expect(os.listdir(d) == ["t.json"], f"temporary files left: {os.listdir(d)}")

        run("trace", plan("valid_predicted.json"), "-o", out)
        trace, lanes, _ = load_trace(out)
        expect(trace["otherData"]["timing"].startswith("predicted"), trace["otherData"])
        steps = [e for e in lanes["compute"] if e["cat"] != "stall"]
        expect([(e["ts"], e["dur"]) for e in steps] == [(0, 10), (10, 20), (33, 10), (46, 17), (63, 10)], steps)
        expect(sum(e["cat"] == "stall" for e in lanes["compute"]) == 2, lanes["compute"])
        expect([(e["name"], e["ts"]) for e in lanes["copy to host"]] == [("w", 10), ("a", 30), ("w", 73)], lanes)
        # Both prefetches are issued at 43: the second waits for the first on the copy stream.
        expect([(e["name"], e["ts"], e["dur"]) for e in lanes["copy to device"]] ==
               [("w", 0, 0), ("a", 43, 3), ("w", 46, 2)], lanes)

        run("trace", plan("valid_recompute.json"), "-o", out)
        _, lanes, _ = load_trace(out)
        expect([e["name"] for e in lanes["recompute"]] == ["a"], lanes)


def case_svg():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "m.svg")
        run("svg", plan("valid_predicted.json"), "-o", out)
        root = ET.parse(out).getroot()  # well-formed
        ns = "{http://www.w3.org/2000/svg}"
        expect(root.tag == ns + "svg", root.tag)
        by_id = {e.get("id"): e for e in root.iter() if e.get("id")}
        for needed in ("budget", "peak-without-plan", "resident", "to-host", "to-device", "legend"):
            expect(needed in by_id, f"no element with id '{needed}'")
        budget = by_id["budget"]
        expect(budget.tag == ns + "line" and budget.get("y1") == budget.get("y2"), "budget is not a level line")
        peak = by_id["peak-without-plan"]
        expect(float(peak.get("y1")) < float(budget.get("y1")), "peak without the plan is not above the budget")
        expect(len(by_id["to-host"].findall(ns + "rect")) == 3, "expected three evict bars")
        expect(len(by_id["to-device"].findall(ns + "rect")) == 3, "expected three prefetch bars")
        kinds = [p.find(ns + "title").text for p in by_id["resident"].findall(ns + "path")]
        expect(kinds == ["input", "parameter", "activation", "activation_grad", "workspace"], kinds)
        text = " ".join(t.text or "" for t in root.iter(ns + "text"))
        contains(text, "budget 5.63 KB", "peak without the plan 6.14 KB", "step", "resident bytes")
        with open(out, "rb") as f:
            first = f.read()
        run("svg", plan("valid_predicted.json"), "-o", out)
        with open(out, "rb") as f:
            expect(f.read() == first, "svg output differs between two runs")


def case_diff():
    out = run("diff", plan("valid.json"), plan("valid_predicted.json")).stdout
    contains(out, "model: same", 'device (absent) -> "h200-pcie"', "advise actions", "+1",
             "actions changed on 1 tensor",
             "advise read_mostly -1->0, evict 0->2, evict 4->5, prefetch -1->0, prefetch 2->4",
             "residency changed on 1 tensor", "resident                 [2, 2]")
    out = run("diff", plan("valid.json"), plan("valid_recompute.json"), "--top", "5").stdout
    contains(out, "discard 1->2, recompute 0@3", "evict 1->2, prefetch 2->3",
             "residency changed on 0 tensors", "-2.05 KB (-100.0%)")
    out = run("diff", plan("valid.json"), plan("rule2_over_budget.json")).stdout
    contains(out, "options: budget_bytes 5632 -> 5000", "actions changed on 0 tensors")
    run("diff", plan("valid.json"), code=2)


def case_exit_codes():
    contains(run("--help").stdout, "exit codes", "verify", "trace", "svg", "diff", "timeline")
    run(code=2)
    run("verify", plan("valid.json"), "--width", "3", code=2)
    run("verify", plan("valid.json"), "--budget", "lots", code=2)
    run("trace", plan("valid.json"), code=2)
    run("frobnicate", code=3)  # not a subcommand: read as a plan, which does not exist
    contains(run("summary", plan("no_such_plan.json"), code=3).stderr, "no_such_plan.json")
    contains(run("verify", plan("not_json.json"), code=4).stderr, "not JSON")
    contains(run("verify", plan("bad_version.json"), code=4).stderr, "schema_version")
    contains(run("summary", plan("missing_field.json"), code=4).stderr, "tensors[2].bytes")
    contains(run("timeline", plan("structure_ids.json"), code=4).stderr, "out of range")
    # Numbers out of range: too large for a double, and INT64_MIN / INT64_MAX bytes (they once
    # aborted, overflowed or crashed autovm-inspect); a FIFO or a directory instead of a plan.
    corpus = os.path.join(HERE, "fuzz_corpus")
    contains(run("summary", os.path.join(corpus, "bytes_1e999.json"), code=4).stderr,
             'after field "bytes"', "1e999")
    for name in ("bytes_int64_min.json", "bytes_int64_max.json"):
        contains(run("summary", os.path.join(corpus, name), code=4).stderr,
                 "tensors[2].bytes", "out of range: a byte count lies in [0, 2^50]")
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "plan.json")
        os.mkfifo(fifo)
        contains(run("summary", fifo, code=3).stderr, "not a regular file")
        contains(run("verify", tmp, code=3).stderr, "it is a directory")
    run("verify", plan("structure_ids.json"), code=1)
    run("verify", plan("valid.json"), "--budget", "5000B", code=1)
    run("verify", plan("rule2_over_budget.json"), "--budget", "5.5KiB", code=0)
    contains(run("svg", plan("valid.json"), "-o", "/nonexistent-folder/m.svg", code=5).stderr,
             "/nonexistent-folder/m.svg")


def verify_json(path, code):
    return json.loads(run("verify", path, "--json", code=code).stdout)


def case_read_remote():
    """valid_read_remote.json: x (1 KB input, used at steps 0 and 3) is evicted after step 0 and
    read remotely by step 3, its last use, with no prefetch."""
    rr = plan("valid_read_remote.json")
    out = run("summary", rr).stdout
    contains(out, "remote     1.02 KB read over the link at step 3; not resident there",
             "evict 1, prefetch 0, discard 0, recompute 0, read_remote 1, advise 0",
             "[1, 3] evict/end; read remotely at 3", "5.12 KB resident with it (step 2")
    out = run("timeline", rr, "--width", "20", "--ascii").stdout
    marks = next((l for l in out.splitlines() if "r read remotely" in l), None)
    expect(marks is not None, f"no remote-read marks:\n{out}")
    contains(marks, "(1.02 KB at 1 step, not in the bars)")
    # 20 columns, 4 a step: step 3 is columns 12-15.
    expect(marks[11:31] == " " * 12 + "rrrr" + " " * 4, f"remote reads marked elsewhere:\n{out}")
    expect("r read remotely" not in run("timeline", plan("valid.json")).stdout, "marks without remote reads")

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.json")
        run("trace", rr, "-o", out)
        _, lanes, counters = load_trace(out)
        expect([(e["name"], e["ts"], e["dur"]) for e in lanes.get("remote read", [])] == [("x", 300, 100)], lanes)
        steps = {e["args"]["step"]: e["args"] for e in lanes["compute"]}
        expect(steps[3].get("remote_read_bytes") == 1024 and "remote_read_bytes" not in steps[2], steps)
        # Resident at step 3: w, a and g; x, read remotely, counts nothing.
        expect(steps[3]["resident_bytes"] == 4096 and counters[3]["args"]["input"] == 0, (steps[3], counters[3]))
        svg = os.path.join(d, "m.svg")
        run("svg", rr, "-o", svg)
        ns = "{http://www.w3.org/2000/svg}"
        by_id = {e.get("id"): e for e in ET.parse(svg).getroot().iter() if e.get("id")}
        bars = by_id["remote-read"].findall(ns + "rect")
        expect([b.find(ns + "title").text for b in bars] == ["x 1.02 KB at step 3"], "expected one remote-read bar")

        result = verify_json(rr, 0)
        expect(result["valid"] and result["resident_peak_bytes"] == 5120, result)  # step 2

        out = run("diff", plan("valid.json"), rr).stdout
        contains(out, "read remotely                  0 B        1.02 KB   +1.02 KB",
                 "read_remote actions              0              1   +1", "evict 0->1, read_remote 2->3")

        # Structure: bytes, after_step, a second read_remote of the same tensor and step; a
        # ready_before_step of n (no step) is an index problem, which every subcommand refuses.
        with open(rr) as f:
            doc = json.load(f)
        path = os.path.join(d, "p.json")

        def verify_changed(change, code):
            p = json.loads(json.dumps(doc))
            change(p)
            with open(path, "w") as f:
                json.dump(p, f)
            return verify_json(path, code)

        def messages(r):
            return " | ".join(v["message"] for v in r["violations"])
        r = verify_changed(lambda p: p["actions"][1].update(bytes=1000), 1)
        expect(r["violations_by_rule"]["structure"] == 1, r)
        contains(messages(r), "reads 1000 bytes of a 1024-byte tensor")
        r = verify_changed(lambda p: p["actions"][1].update(after_step=1), 1)
        contains(messages(r), "a read_remote has after_step = ready_before_step - 1, not 1")
        r = verify_changed(lambda p: p["actions"].append(dict(p["actions"][1])), 1)
        expect([v["rule"] for v in r["violations"]] == [0], r)
        contains(messages(r), "a second read_remote of 'x' at step 3")
        r = verify_changed(lambda p: p["actions"][1].update(after_step=4, ready_before_step=5), 1)
        contains(messages(r), "ready_before_step 5 is out of range [0, 4]")
        contains(run("summary", path, code=4).stderr, "ready_before_step 5 is out of range")

        # A persistent tensor whose uses after its evict are all remote reads is kept on the
        # host between training steps: it starts the step off, so a prefetch before its first
        # use needs no evict before it, and without one step 0 uses it off the GPU.
        def buffer(p):
            p["tensors"][0]["kind"] = "buffer"
            p["lifetimes"][0].update(first=0, last=4, persistent=True)

        def kept(p):
            buffer(p)
            p["actions"].insert(0, {"kind": "prefetch", "tensor": 0, "bytes": 1024, "after_step": -1,
                                    "ready_before_step": 0, "mechanism": "mapped"})
        r = verify_changed(kept, 0)
        expect(r["valid"], r)
        r = verify_changed(buffer, 1)
        expect({k for k, v in r["violations_by_rule"].items() if v} == {"1", "6"}, r)
        expect(any(v["rule"] == 1 and v["step"] == 0 and v["tensor_name"] == "x" for v in r["violations"]), r)


def chain_plan(n, offsets):
    """A chain of n steps: t[i+1] = f(t[i]), each tensor 1 KB, the given offsets."""
    tensors = [{"id": i, "name": f"t{i}", "kind": "input" if i == 0 else "activation",
                "dtype": "uint8", "shape": [1024], "bytes": 1024, "offset": offsets[i]}
               for i in range(n + 1)]
    steps = [{"id": s, "op": "Relu", "phase": "forward", "node": f"n{s}", "inputs": [s],
              "outputs": [s + 1], "workspace": None, "flops": 1024, "bytes_touched": 2048}
             for s in range(n)]
    lifetimes = [{"tensor": i, "first": max(i - 1, 0), "last": min(i, n - 1), "persistent": False,
                  "uses": sorted({max(i - 1, 0), min(i, n - 1)})} for i in range(n + 1)]
    zero = {k: 0 for k in KINDS}
    return {
        "schema_version": 1, "generator": "check_cli.py", "execution_model": "autovm-1",
        "model": {"file": "chain.onnx", "sha256": "0" * 64, "file_bytes": 1, "ir_version": 8,
                  "opset": 17, "producer": "test", "input": {"name": "x", "dtype": "uint8", "shape": [1024]},
                  "batch": 1, "classes": 1, "looks_like_inference_export": False},
        "options": {"budget_bytes": 4096, "batch": 1, "optimizer": "sgd",
                    "conv_workspace_limit_bytes": 0, "alignment_bytes": 256},
        "tensors": tensors, "steps": steps, "lifetimes": lifetimes, "actions": [],
        "statistics": {"tensor_count": n + 1, "step_count": n,
                       "steps_by_phase": {"forward": n, "loss": 0, "backward": 0, "optimizer": 0},
                       "parameter_count": 0, "parameter_bytes": 0, "bytes_by_kind": zero,
                       "total_flops": 0, "peak_bytes": 2048, "peak_step": 0, "peak_by_kind": zero,
                       "peak_tensors": [], "arena_bytes": max(offsets) + 1024,
                       "arena_fragmentation_bytes": 0, "fits_budget": True, "over_budget_bytes": 0,
                       "timeline": {"kinds": KINDS, "bytes": []}}}


def case_large():
    n = 100_000
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "good.json")
        with open(good, "w") as f:  # ping-pong between two slots: valid
            json.dump(chain_plan(n, [(i % 2) * 1024 for i in range(n + 1)]), f, separators=(",", ":"))
        contains(run("verify", good).stdout, "valid", f"{n + 1} tensors")
        bad = os.path.join(d, "bad.json")
        with open(bad, "w") as f:  # one slot: each tensor overlaps the one before it
            json.dump(chain_plan(n, [0] * (n + 1)), f, separators=(",", ":"))
        out = run("verify", bad, code=1).stdout
        contains(out, "rule 7", "... and", "by rule: rule 7: 50000")


def case_random_arena():
    """Rule 7 by the sweep against brute force: the sweep reports a violation iff some pair of
    tensors overlaps in time and space, and each tensor it names overlaps another."""
    rng = random.Random(20240501)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        for trial in range(60):
            n = rng.randint(3, 12)
            p = chain_plan(n, [rng.randrange(0, 6) * 512 for _ in range(n + 1)])
            # Longer lifetimes: some tensors are read again by a later step.
            for t in range(1, n):
                s = rng.randint(t, n - 1)
                if s != t and rng.random() < 0.5:
                    p["steps"][s]["inputs"].append(t)
            life = {}
            for s in p["steps"]:
                for t in s["inputs"] + s["outputs"]:
                    a, b = life.get(t, (s["id"], s["id"]))
                    life[t] = (min(a, s["id"]), max(b, s["id"]))
            life[0] = (0, life[0][1])
            for t, (a, b) in life.items():
                uses = sorted({s["id"] for s in p["steps"] if t in s["inputs"] + s["outputs"]})
                p["lifetimes"][t].update(first=a, last=b, uses=uses)
            live = [sum(1024 for t, (a, b) in life.items() if a <= s <= b) for s in range(n)]
            p["statistics"]["peak_bytes"] = max(live)
            p["statistics"]["peak_step"] = live.index(max(live))
            p["options"]["budget_bytes"] = 1 << 40
            with open(path, "w") as f:
                json.dump(p, f)

            def clash(x, y):
                (a, b), (c, e) = life[x], life[y]
                ox, oy = p["tensors"][x]["offset"], p["tensors"][y]["offset"]
                return x != y and a <= e and c <= b and ox < oy + 1024 and oy < ox + 1024
            any_clash = any(clash(x, y) for x in life for y in life)
            result = json.loads(run("verify", path, "--json", code=None).stdout)
            named = [v["tensor"] for v in result["violations"] if v["rule"] == 7]
            others = [v for v in result["violations"] if v["rule"] != 7]
            expect(not others, f"trial {trial}: unexpected violations {others}")
            expect(bool(named) == any_clash, f"trial {trial}: sweep says {named}, brute force {any_clash}")
            for t in named:
                expect(any(clash(t, y) for y in life), f"trial {trial}: tensor {t} overlaps nothing")


CASES = {name[5:]: f for name, f in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        print(f"usage: check_cli.py INSPECT {{{','.join(CASES)}}}")
        sys.exit(2)
    INSPECT = sys.argv[1]
    try:
        CASES[sys.argv[2]]()
    except Failed as e:
        print(f"FAILED: {e}")
        sys.exit(1)
    print(f"{sys.argv[2]}: ok")
