#!/usr/bin/python3
"""attach(..., executor="runtime") on the CPU (python/autovm/runtime_executor.py): libautovm's
host backend runs the plan on the real tensors' ranges, bound as they appear. Checks the calls
the backend makes to the runtime (every plan step begun and ended in order, once per training
step; what is bound, and when; each step begun before the trainer enqueues it; where a
backend that unmaps pages is asked to bring tensors back), that training stays bit-identical
to plain training while the runtime makes the plan's moves on the bound ranges (the host backend counts them and leaves
the bytes alone, as migration does), and the errors.

usage: test_runtime_executor.py AUTOVM_PLAN LIBAUTOVM
Prints one line per case and 'N passed, M failed'; exits 1 if any failed.
"""
import os
import sys
import tempfile
import warnings

PLAN_EXE, LIB = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
os.environ["AUTOVM_PLAN"], os.environ["AUTOVM_LIB"] = PLAN_EXE, LIB
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "python")]

import torch  # noqa: E402

import autovm  # noqa: E402
from cases import case, finish  # noqa: E402
from adapter_models import Tiny, batch, compare, momentum, train, twins  # noqa: E402

torch.set_num_threads(min(4, os.cpu_count() or 1))


tmp = tempfile.mkdtemp(prefix="autovm-runtime-executor-test-")
torch.manual_seed(0)
tiny = Tiny().train()
x, y = batch(4, 32, 5)
# A plan for this executor: every kind the runtime binds may move (plan()'s default for
# executor="runtime", autovm.RUNTIME_KINDS); the least budget forces moves of each.
plan = autovm.plan(tiny, x, momentum(tiny), budget="min", executor="runtime",
                   out=os.path.join(tmp, "tiny.json"),
                   extra_args=("--workspace-limit", "4KB"))
STEPS = len(plan.steps)


@case("plan(executor=...) sets the default movable kinds; a bad executor is refused")
def _():
    got = sorted(plan.options.get("movable", []))
    if got != sorted(autovm.RUNTIME_KINDS):
        return f"executor='runtime' planned movable {got}, not {sorted(autovm.RUNTIME_KINDS)}"
    copy = autovm.plan(tiny, x, momentum(tiny), budget="min", out=os.path.join(tmp, "copy.json"),
                       extra_args=("--workspace-limit", "4KB"))
    if copy.options.get("movable") != ["activation"]:
        return f"the copy executor's default planned movable {copy.options.get('movable')}"
    try:
        autovm.plan(tiny, x, momentum(tiny), executor="managed")
    except ValueError as e:
        if "executor must be one of 'copy', 'runtime'" not in str(e):
            return f"unclear message: {e}"
    else:
        return "executor='managed' was accepted"


def run_under_runtime(model, opt, steps=3, mode="plan"):
    calls = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        att = autovm.attach(model, opt, plan, executor="runtime", runtime_backend="host",
                            runtime_mode=mode)
    att.runtime.calls = calls
    with att:
        losses = train(model, opt, x, y, steps=steps)
    return losses, att, calls


def by_training_step(calls):
    """The calls cut after each step_end of the plan's last step."""
    out, cur = [], []
    for c in calls:
        cur.append(c)
        if c == ("end", STEPS - 1):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


@case("the plan moves every kind the runtime binds")
def _():
    kinds = {plan.tensors[a["tensor"]]["kind"] for a in plan.actions if a["kind"] == "evict"}
    missing = {"activation", "parameter", "gradient", "optimizer_state"} - kinds
    return f"the plan evicts no {missing}: {plan.action_counts()}" if missing else ""


@case("runtime executor: 3 training steps bit-identical, the plan's moves made on bound ranges")
def _():
    a, oa, b, ob = twins(tiny, momentum)
    la = train(a, oa, x, y)
    lb, att, _ = run_under_runtime(b, ob)
    diff = compare(a, la, b, lb)
    if diff:
        return f"not bit-identical: {diff}"
    s = att.runtime.stats()
    if s["training_steps"] != 3 or s["evictions"] == 0 or s["bytes_to_host"] == 0:
        return f"the runtime moved nothing: {s}"
    if s["memory_bytes"] != 0 or s["binds"] == 0:
        return f"trainer memory expected (no arena, binds made): {s}"
    if att.stats.evictions or att.stats.bytes_to_host:  # the copy path moved nothing
        return f"the adapter copied: {att.stats}"
    print(f"  runtime: {s}")
    return ""


@case("runtime executor: every plan step begun and ended in order, each training step")
def _():
    _, _, calls = run_under_runtime(*twins(tiny, momentum)[2:])
    steps = [c for c in calls if c[0] in ("begin", "end")]
    want = [(k, s) for _ in range(3) for s in range(STEPS) for k in ("begin", "end")]
    return "" if steps == want else f"step calls {steps[:12]}... want {want[:12]}..."


@case("runtime executor: what is bound, and when")
def _():
    _, att, calls = run_under_runtime(*twins(tiny, momentum)[2:])
    per = by_training_step(calls)
    if len(per) != 3:
        return f"{len(per)} training steps of calls"
    first_begin = calls.index(("begin", 0))
    at_attach = [c[1] for c in calls[:first_begin] if c[0] == "bind"]
    params = [n for n, _ in tiny.named_parameters()]
    buffers = [n for n, _ in tiny.named_buffers()
               if n in {t["name"] for t in plan.tensors}]
    # Parameters and buffers once, at attach (persistent), then the input before step 0.
    if at_attach != params + buffers + ["input"]:
        return f"bound before the first step: {at_attach}"
    binds = [[c[1] for c in cs if c[0] == "bind"] for cs in per]
    for i, names in enumerate(binds):
        # The module outputs of the forward, each while its call's steps run.
        for want in ("/conv1/Conv_output_0", "/bn1/BatchNormalization_output_0",
                     "/conv3/Conv_output_0", "logits"):
            if not any(n == want for n in names):
                return f"training step {i}: {want} not bound: {names}"
        # Gradients every training step (new tensors each step): the parameters' before the
        # optimizer's step, and the activation gradients the plan reads remotely (grad_binds).
        grads = [n for n in names if n.startswith("grad/")]
        activation_grads = [plan.tensors[g]["name"] for g in att.grad_binds.values()]
        if sorted(grads) != sorted(["grad/" + p for p in params] + activation_grads):
            return f"training step {i}: gradients bound {grads}"
        # Momentum: made by the first optimizer step, bound once after it (persistent).
        moments = [n for n in names if n.endswith("/momentum")]
        if (i == 0) != (len(moments) == len(params)) or (i > 0 and moments):
            return f"training step {i}: momentum bound {moments}"
    # A module output is bound after its call's first step has begun, before it ended.
    calls0 = per[1]
    at = calls0.index(("bind", "/conv1/Conv_output_0"))
    conv = next(s["id"] for s in plan.steps if s["node"] == "/conv1/Conv")
    if ("begin", conv) not in calls0[:at] or ("end", conv) in calls0[:at]:
        return f"conv1's output bound outside its step {conv}: {calls0[:at + 1]}"
    return ""


@case("runtime executor: an activation gradient is bound before the step that reads it remotely")
def _():
    # The least budget has the max pooling output's gradient (the sum of conv2's and the
    # residual's) read remotely by max pooling's backward: evicted after the step before it.
    remote = {a["tensor"]: a["ready_before_step"] for a in plan.actions
              if a["kind"] == "read_remote" and plan.tensors[a["tensor"]]["kind"] == "activation_grad"}
    if "grad//pool/MaxPool_output_0" not in {plan.tensors[t]["name"] for t in remote}:
        return f"no remote read of the pooling output's gradient: {remote}"
    if plan.options.get("movable_at_last_use") != ["activation_grad"]:
        return f"planned without --movable-at-last-use activation_grad: {plan.options}"
    others = [a for a in plan.actions if plan.tensors[a["tensor"]]["kind"] == "activation_grad"
              and a["kind"] not in ("evict", "read_remote")]
    if others:
        return f"activation gradients moved other than for a remote read: {others}"
    _, att, calls = run_under_runtime(*twins(tiny, momentum)[2:], steps=2)
    if sorted(att.grad_binds.values()) != sorted(remote):
        return f"the adapter reaches {att.grad_binds}, the plan reads {remote} remotely"
    if att.unrealized:
        return f"unrealized: {att.unrealized}"
    for cs in by_training_step(calls):
        for gid, r in remote.items():
            name = plan.tensors[gid]["name"]
            at = cs.index(("bind", name)) if ("bind", name) in cs else -1
            # Bound before step r - 1 ends, where its evict is issued.
            if at < 0 or ("end", r - 1) in cs[:at]:
                return f"{name} bound at {at}, after step {r - 1} ended: {cs[max(at - 3, 0):at + 3]}"
    return ""


@case("runtime executor: actions of tensors not bound are skipped and counted")
def _():
    _, att, _ = run_under_runtime(*twins(tiny, momentum)[2:], steps=1)
    s = att.runtime.stats()
    # The first step's momentum does not exist before the optimizer makes it: its offload at
    # step_begin(0) and prefetch are skipped.
    moved = {plan.tensors[a["tensor"]]["name"] for a in plan.actions
             if a["kind"] == "prefetch"}
    moments = [n for n in moved if n.endswith("/momentum")]
    if not moments or s["unbound_actions"] < len(moments):
        return f"{len(moments)} momentum prefetches, {s['unbound_actions']} skipped: {s}"
    return ""


@case("runtime executor: each step begun before it is enqueued; requires where pages may go")
def _():
    a, oa = twins(tiny, momentum)[2:]
    calls = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        att = autovm.attach(a, oa, plan, executor="runtime", runtime_backend="host")
    att.runtime.calls = calls
    att.runtime.pages = True  # as on the vmm pool: the host backend's require does nothing
    with att:
        train(a, oa, x, y, steps=2)
    per = by_training_step(calls)
    # conv1's step is begun before its output exists (its module's pre hook), so the waits
    # for what it reads come before its kernels: nothing of that step precedes the begin.
    conv = next(s["id"] for s in plan.steps if s["node"] == "/conv1/Conv")
    second = per[1]
    if second.index(("begin", conv)) > second.index(("bind", "/conv1/Conv_output_0")):
        return f"conv1's step begun after its output was bound: {second[:12]}"
    required = [c[1] for c in second if c[0] == "require"]
    # Saved tensors autograd unpacks, named in the plan (conv1's output among them).
    if "/conv1/Conv_output_0" not in required:
        return f"conv1's saved output not required at unpack: {required}"
    # Before the optimizer's step, once its first plan step is begun and before any of its
    # steps ends (they end after it has run): what it reads, gradients and parameters.
    params = [n for n, _ in tiny.named_parameters()]
    start = second.index(("begin", att.first_optimizer_step))
    between = second[start:second.index(("end", att.first_optimizer_step))]
    req = {c[1] for c in between if c[0] == "require"}
    missing = [n for n in params + ["grad/" + n for n in params] if n not in req]
    if missing:
        return f"not required before the optimizer: {missing}"
    return ""


@case("errors: executor='runtime' on CUDA without the allocator; an unknown executor")
def _():
    try:
        autovm.attach(tiny, momentum(tiny), plan, executor="runtime")
        return "no error without allocator.install"
    except autovm.AutoVMError as e:
        if "allocator.install('vmm')" not in str(e):
            return f"message: {e}"
    try:
        autovm.attach(tiny, momentum(tiny), plan, executor="bytes")
        return "no error for an unknown executor"
    except ValueError as e:
        if "copy, runtime" not in str(e):
            return f"message: {e}"
    return ""


@case("a plan with a remote read: parsed, and executed by the runtime (Python moves nothing)")
def _():
    # tests/runtime/plans/remote.json: a is evicted after step 1 and read remotely by step 3.
    path = os.path.join(HERE, "..", "runtime", "plans", "remote.json")
    p = autovm.load_plan(path)
    kinds = [a["kind"] for a in p.actions]
    if kinds != ["evict", "read_remote"] or len(p.remote_reads) != 1:
        return f"kinds {kinds}, remote reads {p.remote_reads}"
    if p.action_counts().get(("read_remote", "activation")) != 1:
        return f"action_counts {p.action_counts()}"
    from autovm.runtime_executor import RuntimeExecutor
    calls = []
    rt = RuntimeExecutor(p, backend="host", calls=calls)
    for _ in range(2):
        rt.start_training_step()
        rt.advance(len(p.steps) - 1)
    s = rt.stats()
    rt.close()
    if s["remote_reads"] != 2 or s["remote_read_bytes"] != 2 * 2048 or s["bytes_to_device"]:
        return f"stats {s}"
    if {c[0] for c in calls} != {"begin", "end"}:
        return f"calls other than the steps': {sorted({c[0] for c in calls})}"
    return ""


sys.exit(finish())
