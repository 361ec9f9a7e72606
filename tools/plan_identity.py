#!/usr/bin/python3
"""Check that two autovm-plan binaries give the same plans, byte for byte, and time them.

A refactoring of the planner must not change a single plan. This plans every case below with
both binaries and compares the JSON files byte for byte:

    models/*.onnx at batches 32, 128, 256, and the 1,000- and 10,000-convolution chains
    (tools/gen_chain.py) at batch 32
  x budgets: the default (no limit), 8GB, min, and 50 % of the step's peak (the default plan's
    statistics.peak_bytes, halved, in bytes: as tools/bench/plan_speed.py writes it)
  x options: none, --no-recompute, --movable activation, --memory-model pytorch

A case that a binary refuses (exit status 6: no plan fits) must be refused by the other with the
same status. Then it times planning: for a sample of the cases, runs alternate between the two
binaries (base, new, then new, base the next round, ...) and the report gives new / base over
the summed CPU times (and wall times).

    tools/plan_identity.py generate BIN DIR      plan every case with BIN into DIR
    tools/plan_identity.py compare DIR_A DIR_B   compare two such directories
    tools/plan_identity.py time BASE NEW         the planning-time ratio NEW / BASE
    tools/plan_identity.py all BASE NEW          all three (plans under a temporary folder,
                                                 or --base-dir / --new-dir when given)

Exit status: 0 same plans (and, for time and all, a ratio within --max-ratio), 1 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCHES = [32, 128, 256]
CHAINS = [1000, 10000]
CHAIN_BATCH = 32
OPTIONS = {
    "plain": [],
    "norecompute": ["--no-recompute"],
    "movable-activation": ["--movable", "activation"],
    "pytorch": ["--memory-model", "pytorch"],
}
BUDGETS = ["default", "8GB", "min", "half"]
# gen_chain.py falls back on the onnx package, which the system Python has.
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def models(chain_dir: str) -> list[tuple[str, str, list[int]]]:
    """(name, path, batches) of every model planned; writes the chains into chain_dir."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "models", "*.onnx"))):
        out.append((os.path.basename(path)[:-5], path, BATCHES))
    for n in CHAINS:
        path = os.path.join(chain_dir, f"chain{n}.onnx")
        if not os.path.exists(path):
            subprocess.run([PYTHON, os.path.join(ROOT, "tools", "gen_chain.py"), str(n), path],
                           check=True, stdout=subprocess.DEVNULL)
        out.append((f"chain{n}", path, [CHAIN_BATCH]))
    return out


def plan(binary: str, model: str, args: list[str], out: str) -> tuple[int, float]:
    """Runs one plan into `out`; returns the exit status (6: infeasible, recorded in `out`)
    and the CPU time (user + system, all threads) the planner took."""
    tmp = out + ".tmp"
    p = subprocess.Popen([binary, model, *args, "-o", tmp, "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    p.stderr.close()
    cpu = usage.ru_utime + usage.ru_stime
    if p.returncode == 0:
        os.replace(tmp, out)
    else:
        with open(out, "w") as f:
            f.write(f"exit {p.returncode}\n")
        if p.returncode != 6:
            print(f"{binary} {model} {' '.join(args)}: exit {p.returncode}: {stderr.strip()}",
                  file=sys.stderr)
    return p.returncode, cpu


def budget_args(budget: str, half_bytes: int) -> list[str]:
    if budget == "default":
        return []
    if budget == "half":
        return ["--budget", f"{half_bytes}B"]
    return ["--budget", budget]


def cases(binary: str, out_dir: str, chain_dir: str):
    """Yields (name, model, args) per case; plans each model's default first for its peak."""
    for name, path, batches in models(chain_dir):
        for batch in batches:
            base = os.path.join(out_dir, f"{name}-b{batch}-default-plain.json")
            if not os.path.exists(base):
                plan(binary, path, ["--batch", str(batch)], base)
            with open(base) as f:
                half = json.load(f)["statistics"]["peak_bytes"] // 2
            for budget in BUDGETS:
                for opt, extra in OPTIONS.items():
                    args = ["--batch", str(batch), *budget_args(budget, half), *extra]
                    yield f"{name}-b{batch}-{budget}-{opt}", path, args


def generate(binary: str, out_dir: str, jobs: int) -> None:
    os.makedirs(out_dir, exist_ok=True)
    chain_dir = os.path.join(out_dir, "chains")
    os.makedirs(chain_dir, exist_ok=True)
    todo = [(n, m, a) for n, m, a in cases(binary, out_dir, chain_dir)
            if not os.path.exists(os.path.join(out_dir, n + ".json"))]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        done = 0
        for _ in pool.map(lambda c: plan(binary, c[1], c[2], os.path.join(out_dir, c[0] + ".json")), todo):
            done += 1
            if done % 25 == 0:
                print(f"{done}/{len(todo)} plans, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    with open(os.path.join(out_dir, "cases.txt"), "w") as f:
        for n, m, a in cases(binary, out_dir, chain_dir):
            f.write(f"{n}\t{os.path.basename(m)} {' '.join(a)}\n")


def compare(dir_a: str, dir_b: str) -> bool:
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(dir_a, "*.json")))
    names_b = sorted(os.path.basename(p) for p in glob.glob(os.path.join(dir_b, "*.json")))
    if names != names_b:
        print(f"different case sets: {sorted(set(names) ^ set(names_b))}")
        return False
    differ, refused = [], 0
    for n in names:
        with open(os.path.join(dir_a, n), "rb") as f:
            a = f.read()
        with open(os.path.join(dir_b, n), "rb") as f:
            b = f.read()
        refused += a.startswith(b"exit ")
        if a != b:
            differ.append(n)
    for n in differ:
        print(f"DIFFERENT: {n}")
    print(f"{len(names) - len(differ)} of {len(names)} plans identical "
          f"({refused} of them refused alike: no plan fits)")
    return not differ


def timing(base: str, new: str, repeat: int, max_ratio: float) -> bool:
    """Alternated runs of a sample: every model at batch 128 at min and 50 %, the 1,000-conv
    chain at min and 50 %, the 10,000-conv chain at 8GB. Compares CPU time (user + system of
    the planner's threads: steadier than wall time on a shared machine) and wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        sample = [(n, m, a) for n, m, a in cases(base, tmp, tmp) if n.endswith("-plain") and (
            ("-b128-" in n and ("-min-" in n or "-half-" in n)) or
            (n.startswith("chain1000-") and ("-min-" in n or "-half-" in n)) or
            (n.startswith("chain10000-") and "-8GB-" in n))]
        cpu = {base: 0.0, new: 0.0}
        wall = {base: 0.0, new: 0.0}
        out = os.path.join(tmp, "t.json")
        for r in range(repeat):
            for _, m, a in sample:
                # Alternated, and the first of each pair swapped every round.
                for binary in ((base, new) if r % 2 == 0 else (new, base)):
                    t0 = time.perf_counter()
                    _, c = plan(binary, m, a, out)
                    wall[binary] += time.perf_counter() - t0
                    cpu[binary] += c
    ratio = cpu[new] / cpu[base]
    print(f"planning time over {len(sample)} cases x {repeat} rounds, alternated: "
          f"CPU base {cpu[base]:.2f} s, new {cpu[new]:.2f} s, new / base = {ratio:.3f}; "
          f"wall base {wall[base]:.2f} s, new {wall[new]:.2f} s, new / base = "
          f"{wall[new] / wall[base]:.3f}")
    return ratio <= max_ratio


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["generate", "compare", "time", "all"])
    p.add_argument("first")
    p.add_argument("second")
    p.add_argument("--jobs", type=int, default=2, help="plans run at once (default 2)")
    p.add_argument("--repeat", type=int, default=3, help="timing rounds (default 3)")
    p.add_argument("--max-ratio", type=float, default=1.05, help="largest new / base time (1.05)")
    p.add_argument("--base-dir", help="with all: the base plans (reused where present)")
    p.add_argument("--new-dir", help="with all: the new plans")
    a = p.parse_args()
    if a.command == "generate":
        generate(a.first, a.second, a.jobs)
        return 0
    if a.command == "compare":
        return 0 if compare(a.first, a.second) else 1
    if a.command == "time":
        return 0 if timing(a.first, a.second, a.repeat, a.max_ratio) else 1
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = a.base_dir or os.path.join(tmp, "base")
        new_dir = a.new_dir or os.path.join(tmp, "new")
        generate(a.first, base_dir, a.jobs)
        generate(a.second, new_dir, a.jobs)
        same = compare(base_dir, new_dir)
        fast = timing(a.first, a.second, a.repeat, a.max_ratio)
    return 0 if same and fast else 1


if __name__ == "__main__":
    sys.exit(main())
