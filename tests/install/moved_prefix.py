"""Shared by the install tests: `meson install --destdir` of the build into a staging folder,
then the prefix moved to `dest` (so nothing can find its data through the install path)."""
import os
import shutil
import subprocess


def install_moved(meson, build, prefix, stage, dest):
    """Installs BUILD under STAGE and moves STAGE+PREFIX to DEST. Returns (ok, meson's output);
    on failure nothing is moved."""
    r = subprocess.run([meson, "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", stage],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return False, r.stdout + r.stderr
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.move(stage + prefix, dest)
    shutil.rmtree(stage)
    return True, r.stdout + r.stderr
