#!/usr/bin/python3
"""Compiles every C++ translation unit of a Meson build with clang (syntax and semantic checks,
no code generation), so that a gcc-only construct cannot creep in unseen.

usage: clang_check.py BUILD_DIR/compile_commands.json [--clang clang++]

Each command of the compilation database (the gcc build's) is run again with clang++ and
-fsyntax-only in place of -c/-o and the dependency-file flags; CUDA sources are left out (nvcc
compiles them). Runs as many at once as the machine has cores. Prints each failure with its
diagnostics and a last line "clang: N translation units, M failed"; exits 1 if any failed,
77 (skipped) when no clang++ is installed.
"""
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys


def clang_command(entry, clang):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = [clang]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MQ", "-MF", "-MT"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD", "-pipe"):
            continue
        out.append(a)
    return out + ["-fsyntax-only"]


def main():
    database = sys.argv[1]
    clang = sys.argv[sys.argv.index("--clang") + 1] if "--clang" in sys.argv else "clang++"
    if shutil.which(clang) is None:
        print(f"clang: {clang} is not installed; skipped")
        return 77
    entries = [e for e in json.load(open(database))
               if e["file"].endswith((".cc", ".cpp", ".cxx")) and "nvcc" not in
               (e.get("command") or " ".join(e.get("arguments", [])))]

    def run(entry):
        r = subprocess.run(clang_command(entry, clang), cwd=entry["directory"],
                           capture_output=True, text=True)
        return entry["file"], r.returncode, r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for file, code, err in pool.map(run, entries):
            if code != 0:
                failed += 1
                print(f"FAIL {file}\n{err[-3000:]}")
    print(f"clang: {len(entries)} translation units, {failed} failed")
    return 1 if failed or not entries else 0


if __name__ == "__main__":
    sys.exit(main())
