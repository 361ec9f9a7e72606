"""A loaded plan: what libautovm's query API returns, plus the few fields the C API does not
expose (options, tensor shapes, statistics.prediction), read from the same JSON file."""
import json
import os

from . import _lib
from .errors import LibraryError


def _phase_peaks(doc):
    """AutoVM's training graph: the peak of live bytes (no swapping) in forward (with the loss),
    backward and optimizer, from the steps' live_bytes."""
    peaks = {}
    for s in doc.get("steps", []):
        phase = "forward" if s.get("phase") == "loss" else s.get("phase")
        peaks[phase] = max(peaks.get(phase, 0), int(s.get("live_bytes", 0)))
    return peaks


def pytorch_margin(doc):
    """PyTorch's modelled extra memory over AutoVM's training graph, in bytes, from a plan
    document made with --memory-model pytorch (None without it): the largest of
    (PyTorch's predicted peak - the graph's peak of live bytes) over forward, backward and
    optimizer, and never below 0. Only the graph's peak matters, so every budget gives the same
    figure. python/autovm/README.md ("The budget is PyTorch's") says why per phase."""
    pt = doc.get("pytorch_memory")
    if not pt:
        return None
    ours = _phase_peaks(doc)
    theirs = {"forward": pt.get("forward_peak_bytes", 0),
              "backward": pt.get("backward_peak_bytes", 0),
              "optimizer": pt.get("optimizer_peak_bytes", 0)}
    diffs = [theirs[k] - ours[k] for k in theirs if k in ours]
    return max([0] + diffs)


class Plan:
    """A plan file loaded through libautovm (the query API) and checked by it.

    tensors / steps / actions: lists of dicts, index = id (actions in the plan's order).
    options: the plan's "options" object (batch, optimizer, recompute, budget_bytes, device...).
    prediction: statistics.prediction (step_time_us, bound_us, ...), {} when absent.
    pytorch_memory: the plan's "pytorch_memory" (autovm-plan --memory-model pytorch) or None.
    modelled_margin_bytes: pytorch_margin() of the plan (None without pytorch_memory).
    requested_budget_bytes / pytorch_margin_bytes: the budget autovm.plan() was asked for, and
    what it took off before planning (budget_bytes + pytorch_margin_bytes); for a plan loaded
    from a file, give them to load_plan() (default: budget_bytes and 0).
    data_parallel: options.data_parallel (autovm-plan --data-parallel) or None.
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
        self.pytorch_memory = doc.get("pytorch_memory")
        self.modelled_margin_bytes = pytorch_margin(doc)
        self.requested_budget_bytes = self.budget_bytes
        self.pytorch_margin_bytes = 0
        self.data_parallel = self.options.get("data_parallel")
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


def load_plan(path, lib=None, requested_budget=None):
    """Loads a plan JSON written by autovm-plan (no autovm-plan needed, only libautovm).
    requested_budget: the budget (bytes) the plan was made for by autovm.plan(), when that took
    PyTorch's margin off it (sets requested_budget_bytes and pytorch_margin_bytes)."""
    p = Plan(path, lib=lib)
    if requested_budget is not None:
        p.requested_budget_bytes = int(requested_budget)
        p.pytorch_margin_bytes = int(requested_budget) - p.budget_bytes
    return p
