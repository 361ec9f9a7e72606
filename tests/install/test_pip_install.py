#!/usr/bin/env python3
"""`pip install ./python` works offline and the installed package finds a `meson install`.

usage: test_pip_install.py MESON BUILD_DIR SOURCE_DIR PREFIX BINDIR LIBDIR VERSION

Installs the build into a temporary prefix (meson install --destdir, then moved elsewhere),
copies python/ out of the source tree (pip builds in the folder it is given) and pip-installs
it into a fresh virtual environment that sees the system's packages (Debian's torch), with
--no-index --no-build-isolation: Debian's setuptools, nothing downloaded. Then, from a folder
outside the source tree, with no AUTOVM_* variables, PYTHONPATH or LD_LIBRARY_PATH, the venv's
python: imports the installed autovm; finds autovm-plan on PATH and libautovm beside it; plans
a small CNN through autovm.plan(); `python -m autovm` says what it found; finds both through
the configuration file instead of PATH; and, with neither, says where it looked.
Prints one line per check and 'N passed, M failed'; exits 1 if any failed.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from moved_prefix import install_moved

MESON, BUILD, SOURCE, PREFIX, BINDIR, LIBDIR, VERSION = sys.argv[1:8]
BUILD, SOURCE = os.path.abspath(BUILD), os.path.abspath(SOURCE)
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}", flush=True)
    if not ok and detail:
        print("  " + str(detail)[-2500:].replace("\n", "\n  "))


# Run by the venv's python; argv: MODE PREFIX VENV
USER = r"""
import json, os, sys
mode, prefix, venv = sys.argv[1:4]
import autovm
from autovm import locate
assert os.path.realpath(autovm.__file__).startswith(os.path.realpath(venv)), autovm.__file__
if mode == "path":
    exe, how = locate.planner()
    lib, lib_how = locate.library()
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    plan = autovm.plan(model, torch.randn(4, 3, 16, 16), opt)
    with open(plan.path) as f:
        options = json.load(f)["options"]
    from autovm import torch_oom
    shim = torch_oom.build()  # from the installed package's torch_oom.cpp, into ~/.cache/autovm
    print(json.dumps({"planner": [exe, how], "library": [lib, lib_how],
                      "batch": options["batch"], "optimizer": options["optimizer"],
                      "steps": len(plan.steps),
                      "shim": [os.path.realpath(torch_oom.SOURCE).startswith(os.path.realpath(venv)),
                               os.path.isfile(shim)]}))
elif mode == "config":
    exe, how = locate.planner()
    lib, lib_how = locate.library()
    print(json.dumps({"planner": [exe, how], "library": [lib, lib_how]}))
else:
    for find in (locate.planner, locate.library):
        try:
            find()
            print("found")
        except autovm.ToolNotFoundError as e:
            print(e)
"""


def main():
    tmp = tempfile.mkdtemp(prefix="autovm-pip-")
    try:
        prefix = os.path.join(tmp, "opt", "autovm")
        ok, output = install_moved(MESON, BUILD, PREFIX, os.path.join(tmp, "stage"), prefix)
        check("meson install --destdir", ok, output)
        if not ok:
            return

        src = os.path.join(tmp, "python")
        shutil.copytree(os.path.join(SOURCE, "python"), src,
                        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        venv = os.path.join(tmp, "venv")
        r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                            "--without-pip", venv], capture_output=True, text=True)
        check("python3 -m venv --system-site-packages", r.returncode == 0, r.stderr)
        py = os.path.join(venv, "bin", "python")
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOVM_", "PIP_"))
                 and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
        clean.update(HOME=tmp, XDG_CONFIG_HOME=os.path.join(tmp, "config"))
        r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                            "--no-cache-dir", "--disable-pip-version-check", "--quiet", src],
                           capture_output=True, text=True, env=clean, cwd=tmp)
        check("pip install --no-index --no-build-isolation ./python", r.returncode == 0,
              r.stdout + r.stderr)
        if r.returncode != 0:
            return
        r = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('autovm'))"],
                           capture_output=True, text=True, env=clean, cwd=tmp)
        check("the installed distribution's version is the project's",
              r.stdout.strip() == VERSION, r.stdout + r.stderr)
        users(py, prefix, venv, clean, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def users(py, prefix, venv, clean, tmp):
    import json
    work = os.path.join(tmp, "work")  # not the source tree, which must not be found
    os.makedirs(work)
    exe = os.path.join(prefix, BINDIR, "autovm-plan")
    lib = os.path.join(prefix, LIBDIR, "libautovm.so.1")
    system_path = "/usr/bin:/bin"

    env = dict(clean, PATH=os.path.join(prefix, BINDIR) + ":" + system_path)
    r = subprocess.run([py, "-c", USER, "path", prefix, venv], capture_output=True, text=True,
                       env=env, cwd=work)
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    check("import autovm from the venv; autovm.plan() plans a small CNN", r.returncode == 0,
          r.stdout + r.stderr)
    if out:
        check("autovm-plan found on PATH", out["planner"] == [exe, "PATH"], out["planner"])
        check("libautovm found beside it", out["library"] == [lib, f"installed with {exe}"],
              out["library"])
        check("the plan is the model's", out["batch"] == 4 and out["optimizer"] == "momentum"
              and out["steps"] > 0, out)
        check("the installed package builds its allocator shim (torch_oom.cpp installed)",
              out["shim"] == [True, True], out["shim"])

    r = subprocess.run([py, "-m", "autovm"], capture_output=True, text=True, env=env, cwd=work)
    check("python -m autovm names what it found", r.returncode == 0
          and f"autovm-plan: {exe} (PATH)" in r.stdout and f"libautovm: {lib} " in r.stdout,
          r.stdout + r.stderr)

    config = os.path.join(tmp, "config", "autovm", "config.json")
    os.makedirs(os.path.dirname(config))
    with open(config, "w") as f:
        json.dump({"prefix": prefix}, f)
    env = dict(clean, PATH=system_path)
    r = subprocess.run([py, "-c", USER, "config", prefix, venv], capture_output=True, text=True,
                       env=env, cwd=work)
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    check("the configuration file's prefix, off PATH", out.get("planner") ==
          [exe, f"'prefix' of {config}"] and out.get("library") == [lib, f"'prefix' of {config}"],
          r.stdout + r.stderr)

    os.remove(config)
    r = subprocess.run([py, "-c", USER, "none", prefix, venv], capture_output=True, text=True,
                       env=env, cwd=work)
    lines = r.stdout.strip().splitlines()
    check("with neither: both not found, saying where to put them",
          r.returncode == 0 and len(lines) == 2
          and lines[0].startswith("autovm-plan not found on PATH")
          and lines[1].startswith("libautovm not found by the dynamic loader")
          and all("$AUTOVM_" in x and config in x for x in lines), r.stdout + r.stderr)


main()
passed = sum(results)
print(f"{passed} passed, {len(results) - passed} failed")
sys.exit(0 if results and all(results) else 1)
