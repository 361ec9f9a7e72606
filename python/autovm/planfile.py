"""A loaded plan: what libautovm's query API returns, plus the few fields the C API does not
expose (options, tensor shapes, statistics.prediction), read from the same JSON file."""
import json
import os
import statistics

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


def resident_bytes(doc):
    """Bytes the plan keeps on the GPU at each step: live bytes (steps[].live_bytes) less the
    tensors off there (from an evict's ready_before_step, or a discard's, until the step after
    the prefetch's or recompute's after_step), in the larger of the step's two moments
    (docs/execution-model.md, "The moment before a step"): the step's own, or the one before it,
    which holds the temporaries of its recompute chains (tensors made again after their
    lifetime ended) but not what the step allocates as it starts (its outputs whose lifetime
    begins there and that it does not read, its workspace less steps[].reserve_bytes). A
    read_remote action changes nothing: its tensor stays off at the step that reads it from
    host memory (docs/execution-model.md, "Remote reads")."""
    steps = doc.get("steps", [])
    n = len(steps)
    off = [0] * (n + 1)
    persistent = {l["tensor"] for l in doc.get("lifetimes", []) if l.get("persistent")}
    temporary = [0] * n
    by_tensor = {}
    for a in doc.get("actions", []):  # not advise or read_remote: neither changes residency
        if a.get("kind") in ("evict", "discard", "prefetch", "recompute"):
            by_tensor.setdefault(a["tensor"], []).append(a)
    for acts in by_tensor.values():
        start = None
        for a in sorted(acts, key=lambda a: (a["after_step"], a["ready_before_step"])):
            if a["kind"] in ("evict", "discard"):
                start = a["ready_before_step"]
            elif start is not None:  # prefetch / recompute: resident again after after_step
                lo, hi = max(0, start), min(n, a["after_step"] + 1)
                if lo < hi:
                    off[lo] += a["bytes"]
                    off[hi] -= a["bytes"]
                start = None
            elif a["kind"] == "recompute" and a["tensor"] not in persistent:  # a temporary
                t = a["ready_before_step"]
                if 0 <= t < n:
                    temporary[t] += a["bytes"]
            else:  # a persistent tensor kept on the host over the step boundary
                hi = min(n, a["after_step"] + 1)
                off[0] += a["bytes"]
                off[hi] -= a["bytes"]
        if start is not None and start < n:  # evicted to the end of the step
            off[start] += a["bytes"]
            off[n] -= a["bytes"]
    out, cur = [], 0
    allocated = _step_allocations(doc)
    for k in range(n):
        cur += off[k]
        out.append(int(steps[k].get("live_bytes", 0)) - cur + max(0, temporary[k] - allocated[k]))
    return out


def _step_allocations(doc):
    """Bytes each step allocates as it starts: its outputs whose lifetime begins there and that
    it does not read, and its workspace less its reserve_bytes."""
    first = {l["tensor"]: (l.get("first"), l.get("persistent", False))
             for l in doc.get("lifetimes", [])}
    # (tensors[k].id is k in a plan; hand-made documents may leave it out)
    size = {t.get("id", k): int(t.get("bytes", 0)) for k, t in enumerate(doc.get("tensors", []))}
    out = []
    for k, st in enumerate(doc.get("steps", [])):
        b = 0
        for o in set(st.get("outputs", [])):
            f, persistent = first.get(o, (None, True))
            if not persistent and f == k and o not in st.get("inputs", []):
                b += size.get(o, 0)
        w = st.get("workspace")
        if w is not None:
            b += max(0, size.get(w, 0) - int(st.get("reserve_bytes", 0)))
        out.append(b)
    return out


SLACK_BYTES = 2 << 20  # the caching allocator rounds a large block up to 2 MiB


def unplanned_indices_bytes(doc):
    """Per step, the bytes of max pooling's int64 indices that a plan made without
    --pool-indices has no tensor for, and which the adapter therefore left on the GPU from
    each pooling step to its backward step, both included: one int64 per output element.
    All zeros for a plan made with --pool-indices (its indices are tensors of the plan)."""
    steps = doc.get("steps", [])
    held = [0] * len(steps)
    if doc.get("options", {}).get("pool_indices"):
        return held
    tensors = doc.get("tensors", [])
    grad_step = {s["node"]: s["id"] for s in steps if s.get("op") == "MaxPoolGrad"}
    for s in steps:
        if s.get("op") != "MaxPool" or len(s["outputs"]) != 1 or s["node"] not in grad_step:
            continue
        elements = 1
        for d in tensors[s["outputs"][0]]["shape"]:
            elements *= d
        for k in range(s["id"], grad_step[s["node"]] + 1):
            held[k] += 8 * elements
    return held


def script_held_input_bytes(doc):
    """Per step, the input bytes PyTorch held beyond resident_bytes(doc) because the plan moved
    the input (autovm-plan --movable input): the training script holds the batch through the
    step, so the eviction freed nothing (the input stayed from the eviction to the prefetch),
    and the prefetch made a second copy, held to the input's last use. So from the evict's
    ready_before_step to the input's last use, both included, one input more than the plan
    counts. All zeros for a plan that leaves the input alone (what autovm.plan makes)."""
    steps = doc.get("steps", [])
    held = [0] * len(steps)
    tensors = doc.get("tensors", [])
    last = {l["tensor"]: l["last"] for l in doc.get("lifetimes", [])}
    for a in doc.get("actions", []):
        t = a["tensor"]
        if a["kind"] != "evict" or not tensors or tensors[t].get("kind") != "input":
            continue
        for k in range(max(0, a["ready_before_step"]), min(len(steps), last.get(t, -1) + 1)):
            held[k] += a["bytes"]
    return held


def step_reserve(runs, step_count, slack_bytes=SLACK_BYTES):
    """Memory PyTorch held beyond a plan, per step, from the adapter's memory traces
    (Attachment.memory_trace of one training step, each with the plan it ran under):
    runs = [(plan document, trace)]. Between two boundaries of a trace the plan's steps
    (previous pos, pos] ran; PyTorch's peak there less the most the plan keeps resident at any
    of those steps is its extra memory there (what the graph has no tensor for: cuDNN
    workspaces, rounding, references the Python code still holds; max pooling's indices only
    under a plan without --pool-indices, and they count as resident then:
    unplanned_indices_bytes; a plan made with a reserve has it in its live bytes, which is
    taken off: steps[].reserve_bytes; an input the plan moved was held by the script as well:
    script_held_input_bytes). An entry
    "end", or the -1 of the next training step, covers the steps after the last boundary (the
    optimizer); the first entry's peak, with nothing before it, is not used. Each step gets the
    largest extra over the runs, never below 0, plus slack_bytes (default 2 MiB, one large
    block's rounding by the caching allocator: the same step measured under two plans differed
    by up to 0.26 MB on the H200): {"step_bytes": [...]} for autovm-plan --reserve (or
    autovm.plan(reserve=...))."""
    reserve = [0] * step_count
    for doc, trace in runs:
        # The traced plan's own reserve (steps[].reserve_bytes, part of its live bytes) was
        # PyTorch's memory, not the plan's tensors; indices a plan without --pool-indices left
        # on the GPU were PyTorch's too, though the graph has no tensor for them. So the
        # reserve is what no plan has a tensor for, whatever reserve the traced plan had.
        resident = [r - int(s.get("reserve_bytes", 0)) + i + h for r, s, i, h in
                    zip(resident_bytes(doc), doc["steps"], unplanned_indices_bytes(doc),
                        script_held_input_bytes(doc))]
        if len(resident) != step_count:
            raise ValueError(f"a plan of {len(resident)} steps for a reserve of {step_count}")
        for first, last, peak in trace_intervals(trace, step_count):
            extra = peak - max(resident[first:last + 1])
            for k in range(first, last + 1):
                reserve[k] = max(reserve[k], extra)
    return {"step_bytes": [r + slack_bytes for r in reserve]}


def trace_intervals(trace, step_count):
    """The intervals of a memory trace (Attachment.memory_trace) of a plan of step_count
    steps: (first, last, peak) for each entry after which plan steps first..last (both
    included) ran, with the peak the entry recorded over them. An entry "end", or the -1 of
    the next training step, covers the steps after the last boundary; the first entry, with
    nothing before it, starts the walk."""
    prev = None  # the last step covered so far (-1: a training step has just started)
    for e in trace:
        pos = e["pos"]
        hi = step_count - 1 if pos in ("end", -1) else int(pos)
        if prev is not None and hi > prev:
            yield prev + 1, hi, int(e["peak"])
        if pos == -1:  # the peak before it was the previous training step's
            prev = -1
        elif prev is None or hi > prev:
            prev = hi


def step_times(steps, rows, skip=1):
    """Each plan step's compute time from a profile run's marks (Attachment.time_rows(): dicts
    with the training step, the plan position "pos" and "us"), as autovm-plan --step-times
    reads them: {"step_us": [...]}, one per plan step.

    Each training step's marks must start at pos -1 (the forward's start) and end at the last
    plan step (the optimizer's end): one forward, backward and optimizer step per training
    step. Between two marks the plan steps (previous pos, pos] ran; their time is shared among
    them in proportion to the plan's own compute_us (evenly when those are all 0). Time before
    a mark that issued nothing new (its pos not past the previous one) goes to the steps of the
    next mark that does. Each step's time is the median over the training steps after the
    first `skip` (warm-up: cuDNN's algorithm search, the caching allocator's first blocks)."""
    n = len(steps)
    weights = [max(0.0, float(s.get("compute_us", 0) or 0)) for s in steps]
    runs = {}
    for r in rows:
        runs.setdefault(r["step"], []).append(r)
    timed = []
    for i, (training_step, marks) in enumerate(runs.items()):
        if i < skip:
            continue
        first, last = marks[0]["pos"], marks[-1]["pos"]
        if first != -1 or last != n - 1:
            raise ValueError(
                f"training step {training_step}: its marks run from plan position {first} to "
                f"{last}, not from -1 to {n - 1} (the plan's last step): time one forward, "
                "backward and optimizer step per training step, under the plan these rows "
                "were recorded with")
        t = [0.0] * n
        prev_pos, prev_us, carry = -1, float(marks[0]["us"]), 0.0
        for m in marks[1:]:
            pos, us = int(m["pos"]), float(m["us"])
            dt, prev_us = carry + max(0.0, us - prev_us), us
            if pos <= prev_pos:
                carry = dt
                continue
            carry = 0.0
            ks = range(prev_pos + 1, pos + 1)
            w = sum(weights[k] for k in ks)
            for k in ks:
                t[k] = dt * (weights[k] / w if w > 0 else 1.0 / len(ks))
            prev_pos = pos
        timed.append(t)
    if not timed:
        raise ValueError(f"no training step timed after the first {skip} (warm-up): time more "
                         "steps")
    return {"step_us": [statistics.median(col) for col in zip(*timed)]}


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
    calibration: what autovm.plan()'s calibration measured (autovm/calibrate.py), or None.
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
        self.calibration = None
        self.conv_workspaces = None
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

    @property
    def remote_reads(self):
        """The read_remote actions: steps that read a tensor where its evicted copy lies in host
        memory (the runtime executes them; docs/execution-model.md, "Remote reads")."""
        return [a for a in self.actions if a["kind"] == "read_remote"]

    def action_counts(self):
        """{(action kind, tensor kind): count}, every kind (read_remote included)."""
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
