"""Copies files into a fresh folder: stage_data.py TOP SUBDIR FILE...

Makes TOP/SUBDIR hold exactly the FILEs (TOP is removed first, so its time stamp is new for
Ninja, which tracks TOP as the build step's output). Meson keeps the build tree's copy of the
installed device profiles with it (compiler/meson.build).
"""
import os
import shutil
import sys


def main(top, subdir, *files):
    shutil.rmtree(top, ignore_errors=True)
    dest = os.path.join(top, subdir)
    os.makedirs(dest)
    for f in files:
        shutil.copy2(f, dest)
    os.utime(top)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
