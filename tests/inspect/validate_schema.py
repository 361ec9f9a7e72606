#!/usr/bin/python3
"""Validates plans against schemas/plan.schema.json (JSON Schema 2020-12).

    validate_schema.py [--schema FILE] PLAN...

Exit 0 when every plan is valid, 1 when one is not (each error is printed with its path),
77 (meson's "skipped") when Python's jsonschema is not installed (Debian: python3-jsonschema).
"""

import argparse
import json
import os
import sys

try:
    import jsonschema
except ImportError:
    print("skipped: Python's jsonschema is not installed (apt-get install python3-jsonschema)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SCHEMA = os.path.join(HERE, "..", "..", "schemas", "plan.schema.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", default=DEFAULT_SCHEMA)
    parser.add_argument("plans", nargs="+", metavar="PLAN")
    args = parser.parse_args()
    with open(args.schema, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    failed = 0
    for path in args.plans:
        try:
            with open(path, encoding="utf-8") as f:
                plan = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: cannot read: {e}")
            failed += 1
            continue
        errors = sorted(validator.iter_errors(plan), key=lambda e: list(e.absolute_path))
        for e in errors[:20]:
            where = "/".join(str(p) for p in e.absolute_path) or "(the plan)"
            print(f"{path}: {where}: {e.message}")
        if len(errors) > 20:
            print(f"{path}: ... and {len(errors) - 20} more errors")
        if errors:
            failed += 1
        else:
            print(f"{path}: valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
