"""What the adapter records: Stats (counts and bytes of what it did since attach() or
reset_stats()) and, when the caller asks, the memory and time traces at plan boundaries
(Attachment.memory_trace and Attachment.time_trace, documented in Attachment.__init__), read
back by time_rows() and measured_step_times().

_Trace is a part of Attachment (adapter.py) and assumes its attributes torch, model, plan,
memory_trace, time_trace, first_optimizer_step and _steps (the training steps begun).
"""
import time


class Stats:
    """What the adapter did, summed over the training steps since attach() (or reset())."""

    FIELDS = ("training_steps",      # COUNT: forward passes run under the plan
              "evictions",           # COUNT: saved tensors copied to host and dropped on the GPU
              "bytes_to_host",       # SUM: their bytes
              "prefetches",          # COUNT: copies back issued ahead, at the plan's after_step
              "late_prefetches",     # COUNT: copies back issued at unpack (not yet prefetched)
              "bytes_to_device",     # SUM: bytes of both kinds of copies back
              "missed_evictions",    # COUNT: plan evictions of activations PyTorch never saved
              "missed_bytes",        # SUM: their bytes
              "discards",            # COUNT: saved tensors dropped on the GPU to be regenerated
              "recomputes",          # COUNT: tensors made again by a chain (temporaries too)
              "bytes_recomputed",    # SUM: their bytes
              "replays",             # COUNT: ops run by chains (one for a step's several outputs)
              "late_recomputes",     # COUNT: chains run at unpack (no boundary before the use)
              "missed_discards")     # COUNT: plan discards of tensors not held by identity

    def __init__(self):
        for f in self.FIELDS:
            setattr(self, f, 0)

    def as_dict(self):
        return {f: getattr(self, f) for f in self.FIELDS}

    def __repr__(self):
        return "Stats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"


class _Trace:
    """Attachment's traces and timing marks (see the module's docstring)."""

    def _trace(self, pos):
        if self.memory_trace is None:
            return
        torch = self.torch
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        from . import allocator

        if allocator.installed() == "global":  # PyTorch's statistics raise: the pool's
            # On a vmm pool an evicted tensor stays allocated with its pages unmapped, so
            # the device memory is what the live allocations' chunks hold (in use).
            s = allocator.stats()
            vmm = allocator.memory() == "vmm"
            row = {"step": self._steps, "pos": pos,
                   "allocated": s["in_use_bytes" if vmm else "allocated_bytes"],
                   "peak": s["peak_in_use_bytes" if vmm else "peak_allocated_bytes"]}
            if vmm:  # what the trainer asked for, and the runtime's paging so far
                row.update(asked=s["allocated_bytes"], peak_asked=s["peak_allocated_bytes"],
                           paged_out=s["paged_out_bytes"], paged_in=s["paged_in_bytes"])
            self.memory_trace.append(row)
            allocator.reset_peaks()
            return
        self.memory_trace.append({"step": self._steps, "pos": pos,
                                  "allocated": torch.cuda.memory_allocated(),
                                  "peak": torch.cuda.max_memory_allocated()})
        torch.cuda.reset_peak_memory_stats()

    def _time(self, training_step, pos):
        if self.time_trace is None:
            return
        torch = self.torch
        if torch.cuda.is_available() and torch.cuda.is_initialized() and self._on_cuda():
            mark = torch.cuda.Event(enable_timing=True)
            mark.record()
        else:
            mark = time.perf_counter_ns()
        self.time_trace.append({"step": training_step, "pos": pos, "mark": mark})

    def _on_cuda(self):
        q = next(self.model.parameters(), None)
        return q is not None and q.is_cuda

    def _optimizer_mark(self, done):
        """The optimizer's step starts after the training step's backward and ends the step."""
        last = len(self.plan.steps) - 1
        if self.runtime is not None:
            self.runtime.optimizer_boundary(self, done)
        self._time(self._steps, last if done else self.first_optimizer_step - 1)

    def time_rows(self):
        """time_trace with each mark read: [{"step", "pos", "us"}], us from an arbitrary origin
        (waits for the GPU to reach the last mark). JSON-ready, for planfile.step_times."""
        trace = self.time_trace or []
        events = [e["mark"] for e in trace if not isinstance(e["mark"], int)]
        if events:
            events[-1].synchronize()
        rows = []
        for e in trace:
            mark = e["mark"]
            us = mark / 1e3 if isinstance(mark, int) else events[0].elapsed_time(mark) * 1e3
            rows.append({"step": e["step"], "pos": e["pos"], "us": us})
        return rows

    def measured_step_times(self, skip=1):
        """Each plan step's compute time in microseconds, measured by time_trace (the median
        over its training steps after the first `skip`): {"step_us": [...]} for autovm-plan
        --step-times (autovm.plan(..., step_times=...)). planfile.step_times says how."""
        from .planfile import step_times
        return step_times(self.plan.steps, self.time_rows(), skip=skip)
