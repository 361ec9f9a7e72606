#!/usr/bin/env python3
"""`meson install` gives working tools wherever the prefix ends up.

usage: test_install.py MESON BUILD_DIR SOURCE_DIR PREFIX BINDIR LIBDIR INCLUDEDIR DATADIR CXX... 

Installs the build into a temporary folder with `meson install --destdir`, moves the prefix to
another folder (deleting the staging folder), then: every file the install promises is there
(the profiles and schemas exactly as in the source tree); the moved autovm-plan finds its
shipped profiles beside itself, plans, and autovm-inspect verifies the plan; AUTOVM_PROFILE_PATH
adds a folder searched first; with the profiles gone the error lists where it looked; a C++
program built against the moved headers and pkg-config file runs with the moved libautovm.
Prints one line per check and 'N passed, M failed'; exits 1 if any failed.
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

from moved_prefix import install_moved

MESON, BUILD, SOURCE, PREFIX, BINDIR, LIBDIR, INCLUDEDIR, DATADIR = sys.argv[1:9]
BUILD, SOURCE = os.path.abspath(BUILD), os.path.abspath(SOURCE)
CXX = sys.argv[9:]
MODEL = os.path.join(SOURCE, "models", "resnet18.onnx")
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}")
    if not ok and detail:
        print("  " + str(detail)[-1500:].replace("\n", "\n  "))


def run(args, env, cwd):
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd)


def main():
    tmp = tempfile.mkdtemp(prefix="autovm-install-")
    try:
        moved = os.path.join(tmp, "elsewhere", "autovm")
        ok, output = install_moved(MESON, BUILD, PREFIX, os.path.join(tmp, "stage"), moved)
        check("meson install --destdir", ok, output)
        if not ok:
            return
        installed(moved)
        planning(moved, tmp)
        library(moved, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def installed(moved):
    for rel in [os.path.join(BINDIR, "autovm-plan"), os.path.join(BINDIR, "autovm-inspect"),
                os.path.join(INCLUDEDIR, "autovm", "autovm.h"),
                os.path.join(INCLUDEDIR, "autovm", "autovm.hpp"),
                os.path.join(LIBDIR, "libautovm.so.1"),
                os.path.join(LIBDIR, "pkgconfig", "autovm.pc")]:
        check(f"installed {rel}", os.path.exists(os.path.join(moved, rel)))
    if os.path.exists(os.path.join(BUILD, "tools", "replay", "autovm-replay")):
        check("installed autovm-replay (a CUDA build)",
              os.path.exists(os.path.join(moved, BINDIR, "autovm-replay")))
    for kind in ("profiles", "schemas"):
        src = os.path.join(SOURCE, kind)
        dst = os.path.join(moved, DATADIR, "autovm", kind)
        want = sorted(f for f in os.listdir(src) if f.endswith(".json"))
        have = sorted(os.listdir(dst)) if os.path.isdir(dst) else []
        check(f"{DATADIR}/autovm/{kind} holds {kind}/*.json", have == want,
              f"installed {have}, source {want}")
        same = all(filecmp.cmp(os.path.join(src, f), os.path.join(dst, f), shallow=False)
                   for f in want if f in have)
        check(f"{DATADIR}/autovm/{kind} files equal the source's", same)


def planning(moved, tmp):
    plan_exe = os.path.join(moved, BINDIR, "autovm-plan")
    inspect_exe = os.path.join(moved, BINDIR, "autovm-inspect")
    profiles = os.path.join(moved, DATADIR, "autovm", "profiles")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOVM_")}
    work = os.path.join(tmp, "work")  # not the source tree: nothing found relative to it
    os.makedirs(work)
    out = os.path.join(work, "plan.json")

    r = run([plan_exe, MODEL, "--batch", "4", "--device", "rtx3070-8gb", "--quiet", "-o", out],
            env, work)
    check("the moved autovm-plan plans with a shipped profile", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        with open(out) as f:
            device = json.load(f)["options"].get("device")
        check("the plan names the device", device == "rtx3070-8gb", device)
        v = run([inspect_exe, "verify", out], env, work)
        check("the moved autovm-inspect verifies it", v.returncode == 0, v.stdout + v.stderr)

    r = run([plan_exe, MODEL, "--batch", "4", "--device", "gtx-9000", "--quiet"], env, work)
    check("an unknown device: exit 2, the shipped profiles listed",
          r.returncode == 2 and "h200-pcie" in r.stderr and "rtx3070-8gb" in r.stderr, r.stderr)
    check("an unknown device: says it looked beside the moved binary",
          f"{profiles} (beside {plan_exe})" in r.stderr, r.stderr)

    mine = os.path.join(work, "my-profiles")
    os.makedirs(mine)
    with open(os.path.join(profiles, "h200-pcie.json")) as f:
        profile = json.load(f)
    profile["name"] = "my-gpu"
    with open(os.path.join(mine, "my-gpu.json"), "w") as f:
        json.dump(profile, f)
    env_path = dict(env, AUTOVM_PROFILE_PATH=os.path.join(work, "absent") + ":" + mine)
    r = run([plan_exe, MODEL, "--batch", "4", "--device", "my-gpu", "--quiet", "-o", out],
            env_path, work)
    check("AUTOVM_PROFILE_PATH adds a folder of profiles", r.returncode == 0, r.stderr)
    r = run([plan_exe, MODEL, "--batch", "4", "--device", "v100-16gb-pcie", "--quiet", "-o", out],
            env_path, work)
    check("with AUTOVM_PROFILE_PATH the installed profiles still count", r.returncode == 0,
          r.stderr)

    shutil.rmtree(profiles)
    r = run([plan_exe, MODEL, "--batch", "4", "--quiet", "-o", out], env_path, work)
    looked = [f"{os.path.join(work, 'absent')} ($AUTOVM_PROFILE_PATH)",
              f"{mine} ($AUTOVM_PROFILE_PATH)", f"{profiles} (beside {plan_exe})"]
    check("profiles gone: exit 2, naming h200-pcie and every folder searched",
          r.returncode == 2 and "unknown device 'h200-pcie'" in r.stderr
          and all(x in r.stderr for x in looked), r.stderr)


PROGRAM = r"""
#include <autovm/autovm.h>
#include <cstdio>
int main() {
  int v = autovm_version();
  std::printf("%d\n", v);
  return v == AUTOVM_API_VERSION ? 0 : 1;
}
"""


def library(moved, tmp):
    pc_dir = os.path.join(moved, LIBDIR, "pkgconfig")
    env = dict(os.environ, PKG_CONFIG_PATH=pc_dir)
    r = subprocess.run(["pkg-config", f"--define-variable=prefix={moved}", "--cflags", "--libs",
                        "autovm"], capture_output=True, text=True, env=env)
    check("pkg-config finds autovm in the moved prefix", r.returncode == 0, r.stderr)
    if r.returncode != 0:
        return
    flags = r.stdout.split()
    check("pkg-config's flags point into the moved prefix",
          f"-I{os.path.join(moved, INCLUDEDIR)}" in flags
          and f"-L{os.path.join(moved, LIBDIR)}" in flags and "-lautovm" in flags, flags)
    src, exe = os.path.join(tmp, "use.cc"), os.path.join(tmp, "use")
    with open(src, "w") as f:
        f.write(PROGRAM)
    r = subprocess.run(CXX + [src, "-o", exe] + flags, capture_output=True, text=True)
    check("a C++ program builds against the installed header and library", r.returncode == 0,
          r.stderr)
    if r.returncode == 0:
        r = subprocess.run([exe], capture_output=True, text=True,
                           env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(moved, LIBDIR)))
        check("it runs with the moved libautovm (API version matches)", r.returncode == 0,
              r.stdout + r.stderr)


main()
passed = sum(results)
print(f"{passed} passed, {len(results) - passed} failed")
sys.exit(0 if results and all(results) else 1)
