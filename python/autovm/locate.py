"""Where the package finds autovm-plan and libautovm (README.md, "Install").

Each is looked for in this order, and the first found is used: what the caller or the user
names explicitly first, then what is installed where programs and libraries are normally
found, then, for developers, the build tree of the checkout the package was imported from.

autovm-plan:
  1. the `planner=` argument of autovm.plan();
  2. $AUTOVM_PLAN;
  3. the configuration file's "planner", else "prefix"/bin/autovm-plan;
  4. autovm-plan on PATH;
  5. build/compiler/driver/autovm-plan of the checkout holding this package.

libautovm:
  1. the `lib=` argument;
  2. $AUTOVM_LIB;
  3. the configuration file's "library", else the one under its "prefix";
  4. the one installed with the autovm-plan that steps 2-4 above find: PREFIX/lib*/ for
     PREFIX/bin/autovm-plan (so putting a `meson install` prefix's bin/ on PATH is enough);
  5. the dynamic loader's libautovm.so.1 (LD_LIBRARY_PATH, ldconfig's cache, /usr/lib...);
  6. build/runtime/libautovm.so of the checkout holding this package.

The configuration file is $AUTOVM_CONFIG, else $XDG_CONFIG_HOME/autovm/config.json (by default
~/.config/autovm/config.json); a JSON object of strings, every key optional:
    {"prefix": "/opt/autovm"}                        where `meson install` put AutoVM, or
    {"planner": ".../autovm-plan", "library": ".../libautovm.so.1"}

`python3 -m autovm` prints what is found, and where it looked.
"""
import ctypes
import glob
import json
import os
import shutil

from .errors import ToolNotFoundError

SONAME = "libautovm.so.1"
CONFIG_KEYS = ("prefix", "planner", "library")


def config_path():
    """The configuration file's path (it need not exist)."""
    if os.environ.get("AUTOVM_CONFIG"):
        return os.environ["AUTOVM_CONFIG"]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "autovm", "config.json")


def config():
    """The configuration file's settings ({} when there is none); raises ToolNotFoundError
    naming the file when it is not a JSON object of known string keys."""
    path = config_path()
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            settings = json.load(f)
    except (OSError, ValueError) as e:
        raise ToolNotFoundError(f"AutoVM configuration {path}: cannot read it as JSON: {e}") \
            from None
    if not isinstance(settings, dict):
        raise ToolNotFoundError(f"AutoVM configuration {path}: must be a JSON object")
    for key, value in settings.items():
        if key not in CONFIG_KEYS:
            raise ToolNotFoundError(f"AutoVM configuration {path}: unknown key '{key}' (the keys "
                                    f"are {', '.join(CONFIG_KEYS)})")
        if not isinstance(value, str) or not value:
            raise ToolNotFoundError(f"AutoVM configuration {path}: '{key}' must be a path")
    return settings


def checkout_root():
    """The source checkout this package is imported from, or None when it is installed."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(root, "meson.build")) and \
            os.path.isdir(os.path.join(root, "compiler", "driver")):
        return root
    return None


def _is_program(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


# A place named explicitly (an argument, a variable, the configuration) that lacks the file is
# an error, not a reason to look further: the user meant that one.
EXPLICIT, FOUND = True, False
BUILD_TREE = "the checkout's build tree"


def _planner_candidates(path):
    """(path or None, where, explicit) in search order."""
    cfg = config()
    yield path, "the path given", EXPLICIT
    yield os.environ.get("AUTOVM_PLAN"), "$AUTOVM_PLAN", EXPLICIT
    if "planner" in cfg:
        yield cfg["planner"], f"'planner' of {config_path()}", EXPLICIT
    elif "prefix" in cfg:
        yield (os.path.join(cfg["prefix"], "bin", "autovm-plan"), f"'prefix' of {config_path()}",
               EXPLICIT)
    yield shutil.which("autovm-plan"), "PATH", FOUND
    root = checkout_root()
    if root:
        yield (os.path.join(root, "build", "compiler", "driver", "autovm-plan"), BUILD_TREE,
               FOUND)


def planner(path=None):
    """(path of autovm-plan, how it was found); raises ToolNotFoundError naming every place
    looked in."""
    looked = []
    for candidate, where, explicit in _planner_candidates(path):
        if not candidate:
            continue
        if _is_program(candidate):
            return os.path.abspath(candidate), where
        if explicit:
            raise ToolNotFoundError(
                f"autovm-plan not found at {candidate} ({where}): no executable file there. "
                "Name the right one, or leave it to the search ($AUTOVM_PLAN, the configuration "
                f"{config_path()}, PATH; python3 -m autovm shows it)")
        looked.append(f"{candidate} ({where})")
    raise ToolNotFoundError(
        "autovm-plan not found on PATH" + "".join(f"; nor at {x}" for x in looked) + ". Install "
        "AutoVM (meson install) and put its bin/ on PATH, or set $AUTOVM_PLAN or the "
        f"configuration file {config_path()} (python3 -m autovm). On a machine without "
        "it, make the plan elsewhere and use autovm.load_plan(FILE)")


def _beside(prefix):
    """libautovm under an install prefix: PREFIX/lib/<multiarch>/, lib64/ or lib/ (None if
    there is none)."""
    for pattern in ("lib/*/" + SONAME, "lib64/" + SONAME, "lib/" + SONAME):
        found = sorted(glob.glob(os.path.join(glob.escape(prefix), pattern)))
        if found:
            return found[0]
    return None


def _loaded_file(soname):
    """The file the dynamic loader loads for `soname` (the soname itself when the loader cannot
    say which), or None when it finds none."""
    try:
        lib = ctypes.CDLL(soname)
    except OSError:
        return None

    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

    try:
        dladdr = ctypes.CDLL(None).dladdr
        symbol = ctypes.cast(lib.autovm_version, ctypes.c_void_p)
    except AttributeError:
        return soname
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    info = DlInfo()
    if dladdr(symbol, ctypes.byref(info)) and info.fname:
        return os.fsdecode(info.fname)
    return soname


def _library_candidates(path):
    cfg = config()
    yield path, "the path given", EXPLICIT
    yield os.environ.get("AUTOVM_LIB"), "$AUTOVM_LIB", EXPLICIT
    if "library" in cfg:
        yield cfg["library"], f"'library' of {config_path()}", EXPLICIT
    elif "prefix" in cfg:
        yield (_beside(cfg["prefix"]) or os.path.join(cfg["prefix"], "lib", SONAME),
               f"'prefix' of {config_path()}", EXPLICIT)
    try:
        exe, how = planner()
    except ToolNotFoundError:
        exe, how = None, None
    if exe and how != BUILD_TREE:
        prefix = os.path.dirname(os.path.dirname(exe))
        yield (_beside(prefix) or os.path.join(prefix, "lib", SONAME), f"installed with {exe}",
               FOUND)
    yield _loaded_file(SONAME), "the dynamic loader", FOUND
    root = checkout_root()
    if root:
        yield os.path.join(root, "build", "runtime", "libautovm.so"), BUILD_TREE, FOUND


def library(path=None):
    """(path of libautovm, how it was found); raises ToolNotFoundError naming every place
    looked in."""
    looked = []
    for candidate, where, explicit in _library_candidates(path):
        if not candidate:
            continue
        if os.path.isfile(candidate) or where == "the dynamic loader":
            return (os.path.abspath(candidate) if os.sep in candidate else candidate), where
        if explicit:
            raise ToolNotFoundError(
                f"libautovm not found at {candidate} ({where}). Name the right file, or leave "
                f"it to the search ($AUTOVM_LIB, the configuration {config_path()}, beside "
                "autovm-plan, the dynamic loader; python3 -m autovm shows it)")
        looked.append(f"{candidate} ({where})")
    raise ToolNotFoundError(
        f"libautovm not found by the dynamic loader ({SONAME})"
        + "".join(f"; nor at {x}" for x in looked) + ". Install AutoVM (meson install) and put "
        "its bin/ on PATH, or set $AUTOVM_LIB or the configuration file "
        f"{config_path()} (python3 -m autovm)")


def main():
    print(__doc__.strip().split("\n\n", 1)[1])
    print(f"\nconfiguration file: {config_path()}"
          + ("" if os.path.exists(config_path()) else " (none)"))
    status = 0
    for name, find in (("autovm-plan", planner), ("libautovm", library)):
        try:
            found, where = find()
            print(f"{name}: {found} ({where})")
        except ToolNotFoundError as e:
            print(f"{name}: {e}")
            status = 1
    return status
