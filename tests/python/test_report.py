#!/usr/bin/env python3
"""tools/bench/report.py: a hand-built template and data directory render to the expected page;
--check passes on that page and fails (exit 1) on a changed one; a missing table or renderer is
refused (exit 2) with a message naming it.

usage: test_report.py REPORT_PY
"""
import json
import os
import subprocess
import sys
import tempfile

EXPECTED = """# Title

Prose.

Measured on a test machine, 2026-01-02. Command: `measure --all`. Raw data in `tools/bench/data/speed/`: `runs.csv`.

| case | ms |
|---|---|
| small | 1.5 |
| "large, quoted" | 20 |

A note.
"""


def run(report, *args):
    return subprocess.run([sys.executable, report, *args], capture_output=True, text=True)


def main():
    report = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        os.makedirs(os.path.join(data, "speed"))
        with open(os.path.join(data, "speed", "runs.csv"), "w") as f:
            f.write('case,ms\nsmall,1.5\n"""large, quoted""",20\n')
        with open(os.path.join(data, "speed", "source.json"), "w") as f:
            json.dump({"tables": {"runs": {"render": "csv", "files": ["runs.csv"], "machine": "a test machine",
                                           "date": "2026-01-02", "command": "measure --all",
                                           "note": "A note."}}}, f)
        template = os.path.join(tmp, "page.md.in")
        with open(template, "w") as f:
            f.write("# Title\n\nProse.\n\n{{table speed/runs}}\n")
        page = os.path.join(tmp, "page.md")
        common = ["--template", template, "--data", data, "--page", page]

        r = run(report, "--write", *common)
        got = open(page).read() if os.path.exists(page) else ""
        if r.returncode != 0 or got != EXPECTED:
            failures.append(f"--write: rc {r.returncode}, {r.stderr}\ngot:\n{got}\nexpected:\n{EXPECTED}")
        r = run(report, "--check", *common)
        if r.returncode != 0:
            failures.append(f"--check on the written page: rc {r.returncode}: {r.stdout}{r.stderr}")
        with open(page, "w") as f:
            f.write(EXPECTED.replace("1.5", "1.4"))
        r = run(report, "--check", *common)
        if r.returncode != 1 or "-| small | 1.4 |" not in r.stdout:
            failures.append(f"--check on a changed page: rc {r.returncode} (want 1), diff:\n{r.stdout}")

        with open(template, "w") as f:
            f.write("{{table speed/missing}}\n")
        r = run(report, "--check", *common)
        if r.returncode != 2 or 'no table "missing"' not in r.stderr:
            failures.append(f"a missing table: rc {r.returncode} (want 2): {r.stderr}")
        with open(os.path.join(data, "speed", "source.json"), "w") as f:
            json.dump({"tables": {"missing": {"render": "nosuch", "files": ["runs.csv"], "machine": "m",
                                              "date": "d", "command": "c"}}}, f)
        r = run(report, "--check", *common)
        if r.returncode != 2 or 'unknown renderer "nosuch"' not in r.stderr:
            failures.append(f"an unknown renderer: rc {r.returncode} (want 2): {r.stderr}")

    for f in failures:
        print("FAIL:", f)
    print(f"{5 - len(failures)} of 5 checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
