"""The adapter tests' case runner: each case is a function returning '' (pass) or why it failed.

    from cases import case, finish, raises
    @case("what it checks")
    def _():
        return "" if ok else "why not"
    sys.exit(finish())
"""
import traceback

results = []


def case(name):
    """Runs the decorated function now; an exception fails the case with its traceback."""
    def run(fn):
        try:
            why = fn() or ""
            ok = not why
        except Exception as e:
            ok, why = False, f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {why}" if why else ""), flush=True)
        return fn
    return run


def raises(kind, fn, *needles):
    """'' when fn() raises `kind` with every needle in its message, else what happened."""
    try:
        fn()
    except kind as e:
        missing = [n for n in needles if n not in str(e)]
        return f"message lacks {missing}: {e}" if missing else ""
    except Exception as e:
        return f"raised {type(e).__name__} instead of {kind.__name__}: {e}"
    return f"no {kind.__name__} raised"


def finish():
    """Prints 'N passed, M failed'; the exit status: 1 if any failed or none ran."""
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed or not results else 0
