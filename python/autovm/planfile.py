"""A loaded plan: what libautovm's query API returns, plus the few fields the C API does not
expose (options, tensor shapes, statistics.prediction), read from the same JSON file."""
import json
import os

from . import _lib
from .errors import LibraryError


class Plan:
    """A plan file loaded through libautovm (the query API) and checked by it.

    tensors / steps / actions: lists of dicts, index = id (actions in the plan's order).
    options: the plan's "options" object (batch, optimizer, recompute, budget_bytes, device...).
    prediction: statistics.prediction (step_time_us, bound_us, ...), {} when absent.
    """

    def __init__(self, path, lib=None):
        self.path = os.path.abspath(path)
        self.library = _lib.Library.get(lib)
        (self.tensors, self.steps, self.actions, self.budget_bytes,
         self.arena_bytes) = _lib.read_plan(self.library, self.path)
        # The C API has no call for these: read them from the file libautovm just accepted.
        with open(self.path, "rb") as f:
            doc = json.load(f)
        self.options = dict(doc.get("options", {}))
        self.model_info = doc.get("model", {})
        stats = doc.get("statistics", {})
        self.prediction = dict(stats.get("prediction", {}) or {})
        self.peak_bytes = stats.get("peak_bytes")
        self.shapes = {}
        for t in doc.get("tensors", []):
            self.shapes[t["id"]] = tuple(t.get("shape") or ())
        if len(self.shapes) != len(self.tensors):
            raise LibraryError(f"{self.path}: libautovm reads {len(self.tensors)} tensors, the "
                               f"JSON has {len(self.shapes)}: the file changed while loading")
        self.by_name = {t["name"]: t for t in self.tensors}

    @property
    def batch(self):
        return self.options.get("batch")

    @property
    def optimizer(self):
        return self.options.get("optimizer", "sgd")

    @property
    def recompute(self):
        return bool(self.options.get("recompute", False))

    def action_counts(self):
        counts = {}
        for a in self.actions:
            key = (a["kind"], self.tensors[a["tensor"]]["kind"])
            counts[key] = counts.get(key, 0) + 1
        return counts

    def __repr__(self):
        return (f"<autovm.Plan {os.path.basename(self.path)}: {len(self.tensors)} tensors, "
                f"{len(self.steps)} steps, {len(self.actions)} actions, batch {self.batch}, "
                f"optimizer {self.optimizer}, budget {self.budget_bytes} B>")


def load_plan(path, lib=None):
    """Loads a plan JSON written by autovm-plan (no autovm-plan needed, only libautovm)."""
    return Plan(path, lib=lib)
