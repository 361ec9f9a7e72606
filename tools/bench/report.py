#!/usr/bin/env python3
"""Builds BENCHMARKS.md from the recorded raw data under tools/bench/data/.

The page is a template, tools/bench/BENCHMARKS.md.in: prose, and one line per table of the form

    {{table SECTION/NAME}}

which this script replaces by the table, rendered from the raw data files, with where they came
from: the machine, the date, the command that measured them and the files. The description of
each table is in tools/bench/data/SECTION/source.json:

    {"tables": {"NAME": {"render": "csv", "files": ["runs.csv"], "machine": "...",
                         "date": "YYYY-MM-DD", "command": "...", "note": "..."}}}

"render" names a renderer below (RENDERERS); "files" are relative to the section's directory;
"note" (optional) is printed under the table. A renderer may read more keys of its table
("labels", "only").

usage:
  /usr/bin/python3 tools/bench/report.py            print the page
  /usr/bin/python3 tools/bench/report.py --write    write BENCHMARKS.md
  /usr/bin/python3 tools/bench/report.py --check    exit 1, with a diff, when BENCHMARKS.md differs

Exit codes: 0 done (or the page matches), 1 BENCHMARKS.md differs from the data (--check),
2 a template line, source.json or data file is missing or malformed (the message names it).

Adding a table:
  1. Put the raw data under tools/bench/data/SECTION/ (a new directory for a new question):
     the measuring command's own output (JSON), or a CSV whose first row is the header.
     Where the data were transcribed rather than written by a command, say so in "note".
  2. Describe it in SECTION/source.json as above. A CSV renders as it is with "render": "csv"
     (no code needed). For JSON, write a function `def render_x(section_dir, spec)` that returns
     the table's lines (a markdown table, and any summary lines), add it to RENDERERS as "x".
  3. Add the prose and a `{{table SECTION/NAME}}` line to tools/bench/BENCHMARKS.md.in.
  4. Run `report.py --write`; the test `benchmarks-report` (meson) runs `report.py --check`.
"""
import argparse
import csv
import difflib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tools", "bench", "data")
TEMPLATE = os.path.join(ROOT, "tools", "bench", "BENCHMARKS.md.in")
PAGE = os.path.join(ROOT, "BENCHMARKS.md")
EXIT_DIFFERS, EXIT_INPUT = 1, 2


class InputError(Exception):
    """A template line, source.json or data file that cannot be used; the text says which."""


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{os.path.relpath(path, ROOT)}: {e}")


def markdown(header, rows):
    """A markdown table; every row has the header's number of cells."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        if len(r) != len(header):
            raise InputError(f"a row has {len(r)} cells, the header {len(header)}: {r}")
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return out


def files_of(section_dir, spec):
    names = spec.get("files")
    if not names:
        raise InputError(f"{os.path.relpath(section_dir, ROOT)}/source.json: a table has no \"files\"")
    return [os.path.join(section_dir, n) for n in names]


def render_csv(section_dir, spec):
    """Each CSV file as one table, its first row the header."""
    lines = []
    for path in files_of(section_dir, spec):
        try:
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
        except OSError as e:
            raise InputError(f"{os.path.relpath(path, ROOT)}: {e}")
        if not rows:
            raise InputError(f"{os.path.relpath(path, ROOT)}: empty")
        lines += markdown(rows[0], rows[1:])
    return lines


SIZE_NAMES = {64 << 10: "64 KiB", 1 << 20: "1 MiB", 16 << 20: "16 MiB", 256 << 20: "256 MiB", 4 << 30: "4 GiB"}


def render_replay_bench(section_dir, spec):
    """autovm-replay --bench --json: GB/s in / out / both per mechanism, at five sizes."""
    (path,) = files_of(section_dir, spec)
    rows = load_json(path)["rows"]
    mechanisms = []
    for r in rows:
        if r["mechanism"] not in mechanisms:
            mechanisms.append(r["mechanism"])
    cell = {(r["mechanism"], r["bytes"]): r for r in rows}
    out = []
    for size, name in SIZE_NAMES.items():
        row = [name]
        for m in mechanisms:
            r = cell.get((m, size))
            row.append("-" if r is None else
                       f"{r['to_device_gbps']:.1f} / {r['to_host_gbps']:.1f} / {r['both_total_gbps']:.1f}")
        out.append(row)
    return markdown(["size"] + [f"{m} in / out / both" for m in mechanisms], out)


def render_replay(section_dir, spec):
    """autovm-replay --json of each plan: one row per mode, with the plan's predictions."""
    labels = spec.get("labels", {})
    rows = []
    for path in files_of(section_dir, spec):
        doc = load_json(path)
        p = doc["predictions"]
        label = labels.get(os.path.basename(path), os.path.basename(path))
        for m in doc["modes"]:
            mode = m["mode"]
            predicted = {"resident": p["no_swap_us"], "demand": p["demand_paging_us"]}.get(
                mode, p["autovm_us"] if mode == p["mechanism"] else None)
            rows.append([
                label, mode, f"{m['median_ms']:.1f}",
                "-" if predicted is None else f"{predicted / 1000:.1f}",
                "-" if mode == "resident" else f"{p['bound_us'] / 1000:.1f}",
                f"{m['stall_ms']:.1f}", f"{m['to_host_gb']:.2f} / {m['to_device_gb']:.2f}",
                f"{m['device_bytes'] / 1e9:.2f}", f"{m['host_us_per_call_idle']:.1f}"])
    return markdown(["plan", "mode", "step ms", "predicted ms", "bound ms", "stall ms",
                     "out / in GB", "device GB", "host us/call (idle)"], rows)


CONFIG_NAMES = {
    "plain": "plain",
    "save_on_cpu": "`save_on_cpu(pin_memory=True)`",
    "checkpoint": "checkpointing",
    "autovm_soc": "AutoVM, at the save_on_cpu peak",
    "autovm_half": "AutoVM, at 50 % of plain (or the least it can promise)",
    "autovm_ckpt": "AutoVM, at checkpointing's peak",
    "autovm_rc_soc": "AutoVM recomputing, at the save_on_cpu peak",
    "autovm_rc_half": "AutoVM recomputing, at 50 % of plain (or the least it can promise)",
    "autovm_rc_ckpt": "AutoVM recomputing, at checkpointing's peak",
}
MODEL_NAMES = {"vgg19": "VGG-19", "resnet50": "ResNet-50"}


def spread(values, fmt):
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def render_pytorch_compare(section_dir, spec):
    """pytorch_compare.py --out: one row per model and configuration; repeated runs as a range."""
    only = spec.get("only", {})
    runs = {}  # (model, config) -> results, in file order
    for path in files_of(section_dir, spec):
        keep = only.get(os.path.basename(path))
        for r in load_json(path)["results"]:
            if "error" in r:
                raise InputError(f"{os.path.relpath(path, ROOT)}: {r['model']} {r['config']}: {r['error']}")
            if keep is None or r["config"] in keep:
                runs.setdefault((r["model"], r["config"]), []).append(r)
    order = list(CONFIG_NAMES)
    models = list(dict.fromkeys(m for m, _ in runs))
    rows = []
    for (model, config), rs in sorted(runs.items(), key=lambda kv: (
            models.index(kv[0][0]), order.index(kv[0][1]) if kv[0][1] in order else len(order))):
        plain = runs.get((model, "plain"))
        step = [r["step_ms"] for r in rs]
        first = rs[0]
        st = first.get("adapter_stats")
        planned = "predicted_step_time_ms" in first
        row = [MODEL_NAMES.get(model, model) if config == "plain" else "",
               CONFIG_NAMES.get(config, config), spread(step, "{:.1f}"),
               f"{statistics_median(step) / statistics_median([p['step_ms'] for p in plain]):.2f}x" if plain else "-",
               f"{max(r['max_memory_allocated'] for r in rs) / 1e9:.2f}"]
        if planned:
            row += [f"{first['budget_bytes'] / 1e9:.2f}", f"{first['predicted_step_time_ms']:.1f}",
                    f"{first['bound_ms']:.1f}", spread([s / first["bound_ms"] for s in step], "{:.3f}"),
                    f"{st['bytes_to_host'] / 1e9 / max(1, st['training_steps']):.2f}",
                    first["planned_actions"].get("recompute activation", 0)]
        else:
            row += ["-"] * 6
        rows.append(row)
    return markdown(["model b256", "config", "step ms", "vs plain", "peak GB", "budget GB", "predicted ms",
                     "bound ms", "measured / bound", "to host GB", "recomputes planned"], rows)


def statistics_median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def render_ddp(section_dir, spec):
    """ddp_train.py --out: one row per rank."""
    rows = []
    for path in files_of(section_dir, spec):
        doc = load_json(path)
        for rank in doc["ranks"]:
            plain, auto = rank["plain1"], rank["autovm"]
            budget = rank["planner_budget_bytes"]
            rows.append([MODEL_NAMES.get(doc["model"], doc["model"]), doc["batch_per_rank"], rank["rank"],
                         "yes" if rank["identical"] else "no",
                         f"{auto['median_step_ms']:.1f}", f"{plain['median_step_ms']:.1f}",
                         f"{rank['predicted_step_time_ms']:.1f}",
                         f"{auto['max_memory_allocated'] / 1e9:.3f}", f"{plain['max_memory_allocated'] / 1e9:.3f}",
                         f"{budget / 1e9:.3f}", f"{auto['max_memory_allocated'] / budget:.3f}",
                         auto["adapter_stats"]["late_prefetches"]])
    return markdown(["model", "batch per rank", "rank", "identical to plain DDP", "step ms", "plain ms",
                     "predicted ms", "peak GB", "plain peak GB", "budget GB", "peak / budget",
                     "late prefetches"], rows)


ALLOCATOR_NAMES = {"caching": "PyTorch's caching allocator", "managed": "libautovm pool, managed",
                   "vmm": "libautovm pool, VMM", "mempool": "libautovm pool behind a MemPool"}


def render_allocator_overhead(section_dir, spec):
    """allocator_overhead.py --out: one row per model and allocator, the median over rounds of each
    round's mean step time, as a ratio to the caching allocator's; DDP (one rank) rows after."""
    rows = []
    for path in files_of(section_dir, spec):
        doc = load_json(path)
        for model, by_alloc in doc["summary"].items():
            base = by_alloc["caching"]["median_ms"]
            held = {}
            for r in doc["runs"]:
                if r["model"] == model and not r.get("ddp"):
                    held[r["allocator"]] = max(held.get(r["allocator"], 0),
                                               r.get("pool", {}).get("peak_resident_bytes", 0))
            for alloc, res in by_alloc.items():
                rows.append([MODEL_NAMES.get(model, model), "single GPU", ALLOCATOR_NAMES.get(alloc, alloc),
                             f"{res['median_ms']:.2f}", f"{res['median_ms'] / base:.4f}",
                             f"{res['peak_allocated_bytes'] / 1e9:.2f}",
                             f"{held[alloc] / 1e9:.2f}" if held.get(alloc) else "-", "-"])
        ddp = doc.get("ddp") or []
        base = {r["model"]: r["mean_ms"] for r in ddp if r["allocator"] == "caching"}
        for r in ddp:
            rows.append([MODEL_NAMES.get(r["model"], r["model"]), "DDP, one rank",
                         ALLOCATOR_NAMES.get(r["allocator"], r["allocator"]), f"{r['mean_ms']:.2f}",
                         f"{r['mean_ms'] / base[r['model']]:.4f}", f"{r['peak_allocated_bytes'] / 1e9:.2f}",
                         f"{r['pool']['peak_resident_bytes'] / 1e9:.2f}" if "pool" in r else "-",
                         "yes" if r.get("losses_identical_to_caching") else "no"])
    return markdown(["model b256", "training", "allocator", "step ms", "vs caching", "peak allocated GB",
                     "pool held GB", "losses identical"], rows)


RENDERERS = {
    "csv": render_csv,
    "replay_bench": render_replay_bench,
    "replay": render_replay,
    "pytorch_compare": render_pytorch_compare,
    "ddp": render_ddp,
    "allocator_overhead": render_allocator_overhead,
}


def render_table(key, data=DATA):
    section, _, name = key.partition("/")
    section_dir = os.path.join(data, section)
    where = os.path.relpath(section_dir, ROOT)
    spec = load_json(os.path.join(section_dir, "source.json")).get("tables", {}).get(name)
    if spec is None:
        raise InputError(f"{where}/source.json has no table \"{name}\"")
    missing = [k for k in ("render", "machine", "date", "command") if k not in spec]
    if missing:
        raise InputError(f"{where}/source.json, table \"{name}\": missing {', '.join(missing)}")
    renderer = RENDERERS.get(spec["render"])
    if renderer is None:
        raise InputError(f"{where}/source.json, table \"{name}\": unknown renderer "
                         f"\"{spec['render']}\" (known: {', '.join(sorted(RENDERERS))})")
    try:
        table = renderer(section_dir, spec)
    except KeyError as e:
        raise InputError(f"{where}, table \"{name}\": the data lack the field {e}")
    files = ", ".join(f"`{n}`" for n in spec.get("files", []))
    lines = [f"Measured on {spec['machine']}, {spec['date']}. "
             f"Command: `{spec['command']}`. Raw data in `tools/bench/data/{section}/`: {files}.", ""]
    lines += table
    if spec.get("note"):
        lines += ["", spec["note"]]
    return lines


def render_page(template_text, data=DATA):
    out = []
    for i, line in enumerate(template_text.split("\n"), 1):
        s = line.strip()
        if s.startswith("{{table ") and s.endswith("}}"):
            out += render_table(s[len("{{table "):-2].strip(), data)
        elif "{{" in s:
            raise InputError(f"tools/bench/BENCHMARKS.md.in:{i}: a placeholder is a line of its own, "
                             f"'{{{{table SECTION/NAME}}}}'")
        else:
            out.append(line)
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write BENCHMARKS.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when BENCHMARKS.md differs")
    ap.add_argument("--template", default=TEMPLATE, help="default: tools/bench/BENCHMARKS.md.in")
    ap.add_argument("--data", default=DATA, help="the raw data's root (default: tools/bench/data)")
    ap.add_argument("--page", default=PAGE, help="the file --write and --check use (default: BENCHMARKS.md)")
    a = ap.parse_args()
    try:
        with open(a.template) as f:
            page = render_page(f.read(), a.data)
    except OSError as e:
        print(f"report.py: {e}", file=sys.stderr)
        return EXIT_INPUT
    except InputError as e:
        print(f"report.py: {e}", file=sys.stderr)
        return EXIT_INPUT
    if a.write:
        tmp = a.page + ".tmp"
        with open(tmp, "w") as f:
            f.write(page)
        os.replace(tmp, a.page)
        return 0
    if a.check:
        try:
            with open(a.page) as f:
                current = f.read()
        except OSError as e:
            print(f"report.py: {e}", file=sys.stderr)
            return EXIT_DIFFERS
        if current == page:
            return 0
        sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), page.splitlines(True),
                                                   "BENCHMARKS.md", "report.py's output"))
        print("\nBENCHMARKS.md differs from tools/bench/report.py's output: edit "
              "tools/bench/BENCHMARKS.md.in or the data, then run report.py --write", file=sys.stderr)
        return EXIT_DIFFERS
    sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
