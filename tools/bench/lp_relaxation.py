#!/usr/bin/env python3
"""An experiment, not part of the planner: a linear-programming relaxation of the training step
under a plan's budget, as a second lower bound to set beside compiler/plan/bound.h's.

usage: lp_relaxation.py [--min-mb MB] [--whole MB [--time-limit S]] PLAN.json[.gz]...
       (needs Debian's python3-scipy: HiGHS)

Variables per tensor and step (the tensor's lifetime; every step for a persistent one, the step
wrapping round): its bytes on the GPU at the step's start (Q), bytes moved to the host and back
during the step's window (h, d; a window is the step's compute, the recompute before the next
step and the stall before it), the bytes valid on the host (P), and bytes regenerated before the
step (g) by its recompute chain (producer and, recursively, the producers of its dead inputs,
whose steps and temporaries are charged once per step they run at, their live inputs kept on the
GPU in proportion). A step's inputs, outputs and workspace are whole on the GPU; what is on the
GPU at a step (and the chains' temporaries) stays within the budget; the GPU holds at the next
step at most what it held, plus what arrived and was regenerated; the host holds at most what
left it; each direction moves at most its bandwidth times the window (one queue shared when the
mechanism is not duplex). Minimised: the sum of the windows. Every plan of docs/execution-model.md
is a point of this LP, so its optimum is a lower bound; but a tensor may be split, so it is
weaker than bound.h's where whole tensors matter. Fixed costs per
transfer are left out. Prints the LP's bound beside the plan's prediction and bound.

--whole MB makes the tensors of MB megabytes and up whole (a mixed-integer program: each is
resident or not at each step, its resident bytes counting against the budget, and each of its
recomputes whole, chain included); HiGHS's dual bound, printed when it stops (--time-limit),
is still a lower bound, tighter than the LP's where whole tensors matter.
"""
import gzip
import json
import os
import sys

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)


def mechanism_of(plan):
    """(to-host, to-device bytes per microsecond, duplex) of the plan's device and mechanism."""
    o = plan["options"]
    path = o["device"] if os.path.exists(o["device"]) else os.path.join(ROOT, "profiles", o["device"] + ".json")
    prof = load(path)
    name = o.get("mechanism") or prof["default_mechanism"]
    m = next(m for m in prof["mechanisms"] if m["name"] == name)
    return m["to_host"]["bandwidth_gbps"] * 1e3, m["to_device"]["bandwidth_gbps"] * 1e3, m["duplex"]


def lp_bound(p, bw_h, bw_d, duplex=True, recompute=True, whole_bytes=None, time_limit=None,
             min_bytes=0):
    """(lower bound, best point found) in microseconds from a plan document; None where HiGHS
    finds none. The LP's optimum is both.

    whole_bytes: tensors of at least this many bytes are whole (a mixed-integer program): at
    each step of its lifetime such a tensor is resident or not (a binary; resident bytes count
    against the budget, its bytes on the GPU are at most them), and each recompute of it is
    whole (a binary: its chain's steps, temporaries and pinned inputs whole). HiGHS's dual
    bound is a lower bound whether or not it finishes within time_limit seconds.

    min_bytes: tensors smaller than this are left out: not counted against the budget, never
    moved. Every plan still gives a point (its big tensors' part), so the optimum stays a lower
    bound, weaker by at most what the small tensors would add; the program is much smaller."""
    rops = p['options'].get('recompute_ops')
    MOV = p['options'].get('movable')
    if isinstance(MOV, str): MOV = MOV.split(',')
    T = p['tensors']; L = p['lifetimes']; S = p['steps']; n = len(S)
    B = p['options']['budget_bytes']
    c = [s['compute_us'] for s in S]
    producer = {}
    for s in S:
        for o in s['outputs']: producer.setdefault(o, s['id'])
    used = [set(s['inputs']) | set(s['outputs']) | ({s['workspace']} if s.get('workspace') is not None else set()) for s in S]
    def live(x, k):
        l = L[x]
        return l['persistent'] or (l['first'] <= k <= l['last'])
    nv = 0; cols = {}
    def var(key):
        nonlocal nv
        if key not in cols: cols[key] = nv; nv += 1
        return cols[key]
    rows = []; rhs = []; eq_rows = []; eq_rhs = []
    def le(terms, b): rows.append(terms); rhs.append(b)
    def eq(terms, b): eq_rows.append(terms); eq_rhs.append(b)
    bounds = {}
    binary = set()
    # windows
    for k in range(n):
        var(('w', k)); var(('sig', k))
    movable = [x for x in range(len(T)) if T[x]['bytes'] > 0 and T[x]['bytes'] >= min_bytes and L[x]['uses']]
    budget_terms = [[] for _ in range(n)]
    budget_const = [0.0]*n
    for x in movable:
        bx = T[x]['bytes']; l = L[x]
        ks = range(n) if l['persistent'] else range(l['first'], l['last']+1)
        ks = list(ks)
        for k in ks:
            q = var(('Q', x, k)); bounds[q] = (0, bx)
            fixed = (x in used[k]) or (MOV is not None and T[x]['kind'] not in MOV)
            if fixed:
                bounds[q] = (bx, bx)
            if whole_bytes is not None and bx >= whole_bytes and not fixed:
                r = var(('R', x, k)); bounds[r] = (0, 1); binary.add(r)
                budget_terms[k].append((r, float(bx)))
                le([(q, 1.0), (r, -float(bx))], 0)   # bytes on the GPU only when resident
            else:
                budget_terms[k].append((q, 1.0))
            h = var(('h', x, k)); d = var(('d', x, k)); P = var(('P', x, k))
            bounds[h] = (0, bx); bounds[d] = (0, bx); bounds[P] = (0, bx)
            le([(h, 1.0), (q, -1.0)], 0)          # evict only device-valid bytes
            le([(d, 1.0), (P, -1.0)], 0)          # fetch only host-valid bytes
        # flow between consecutive steps
        for i, k in enumerate(ks):
            if not l['persistent'] and k == ks[-1]: break
            k1 = (k + 1) % n
            if not l['persistent'] and k1 < k: break
            produced_at_k = (x in S[k]['outputs'])
            q0, q1 = cols[('Q', x, k)], cols[('Q', x, k1)]
            d = cols[('d', x, k)]; h = cols[('h', x, k)]
            P0, P1 = cols[('P', x, k)], cols[('P', x, k1)]
            if not produced_at_k:
                terms = [(q1, 1.0), (q0, -1.0), (d, -1.0)]
                if recompute: terms.append((var(('g', x, k1)), -1.0))
                le(terms, 0)
                le([(P1, 1.0), (P0, -1.0), (h, -1.0)], 0)
            else:
                # written at k: host copy stale; only what is evicted in window k (after) counts
                le([(P1, 1.0), (h, -1.0)], 0)
        if not l['persistent']:
            # first step: the producer makes it (or it is an input: resident at its first use)
            P = cols[('P', x, ks[0])]; bounds[P] = (0, 0)
    # recompute chains
    rc_terms = [[] for _ in range(n)]   # compute before step k
    gvars = [(key, idx) for key, idx in cols.items() if key[0] == 'g']
    def chain(x, k, depth=0):
        # returns (steps, temps, pins) or None
        if depth > 30: return None
        pstep = producer.get(x)
        if pstep is None: return None
        ps = S[pstep]
        if ps['phase'] != 'forward' or ps['op'] == 'Dropout': return None
        if rops is not None and ps['op'] not in rops: return None  # --recompute-ops
        if L[x]['persistent']: return None
        steps = {pstep}; temps = set(); pins = set()
        for y in ps['inputs']:
            if T[y]['bytes'] == 0: continue
            if live(y, k): pins.add(y)
            else:
                sub = chain(y, k, depth+1)
                if sub is None: return None
                temps.add(y); steps |= sub[0]; temps |= sub[1]; pins |= sub[2]
        return steps, temps, pins
    for (key, g) in gvars:
        _, x, k = key
        ch = chain(x, k) if recompute else None
        l = L[x]
        if ch is None or k <= producer.get(x, n) + 1 or x in S[k]['outputs']:
            bounds[g] = (0, 0); continue
        bx = T[x]['bytes']; bounds[g] = (0, bx)
        steps, temps, pins = ch
        # share: the fraction of x regenerated (g / bx), or for a whole tensor a binary that
        # is 1 when any of it is
        share, scale = g, 1.0 / bx
        if whole_bytes is not None and bx >= whole_bytes:
            share = var(('y', x, k)); bounds[share] = (0, 1); binary.add(share); scale = 1.0
            le([(g, 1.0), (share, -float(bx))], 0)
        for q in steps:
            u = var(('u', q, k)); bounds.setdefault(u, (0, 1))
            le([(share, scale), (u, -1.0)], 0)
        for y in temps:
            t = var(('T', y, k)); bounds.setdefault(t, (0, T[y]['bytes']))
            le([(share, T[y]['bytes'] * scale), (t, -1.0)], 0)
        for y in pins:
            if ('Q', y, k) in cols:
                le([(share, T[y]['bytes'] * scale), (cols[('Q', y, k)], -1.0)], 0)
    for key, idx in list(cols.items()):
        if key[0] == 'u': rc_terms[key[2]].append((idx, c[key[1]]))
        if key[0] == 'T': budget_terms[key[2]].append((idx, 1.0))
    for k in range(n):
        le(budget_terms[k], B - budget_const[k])
        # w_k = c_k + recompute before k+1 + stall before k+1
        k1 = (k+1) % n
        terms = [(cols[('w', k)], 1.0), (cols[('sig', k1)], -1.0)] + [(i, -v) for i, v in rc_terms[k1]]
        eq(terms, c[k])
    # link capacity per window
    hs = [[] for _ in range(n)]; ds = [[] for _ in range(n)]
    for key, idx in cols.items():
        if key[0] == 'h': hs[key[2]].append(idx)
        if key[0] == 'd': ds[key[2]].append(idx)
    for k in range(n):
        w = cols[('w', k)]
        if duplex:
            le([(i, 1.0) for i in hs[k]] + [(w, -bw_h)], 0)
            le([(i, 1.0) for i in ds[k]] + [(w, -bw_d)], 0)
        else:
            le([(i, 1.0/bw_h) for i in hs[k]] + [(i, 1.0/bw_d) for i in ds[k]] + [(w, -1.0)], 0)
    obj = np.zeros(nv)
    for k in range(n): obj[cols[('w', k)]] = 1.0
    def mat(rr):
        r, cc, v = [], [], []
        for i, terms in enumerate(rr):
            for j, a in terms: r.append(i); cc.append(j); v.append(a)
        return coo_matrix((v, (r, cc)), shape=(len(rr), nv)).tocsr()
    bl = [bounds.get(i, (0, None)) for i in range(nv)]
    # scale: bytes to GB to keep numbers sane
    if whole_bytes is None:
        res = linprog(obj, A_ub=mat(rows), b_ub=np.array(rhs), A_eq=mat(eq_rows), b_eq=np.array(eq_rhs), bounds=bl, method='highs')
        return (res.fun, res.fun) if res.success else (None, None)
    from scipy.optimize import Bounds, LinearConstraint, milp
    lo = np.array([b[0] if b[0] is not None else 0 for b in bl], dtype=float)
    hi = np.array([b[1] if b[1] is not None else np.inf for b in bl], dtype=float)
    integrality = np.zeros(nv)
    integrality[list(binary)] = 1
    cons = [LinearConstraint(mat(rows), -np.inf, np.array(rhs)),
            LinearConstraint(mat(eq_rows), np.array(eq_rhs), np.array(eq_rhs))]
    opts = {"disp": True}
    if time_limit:
        opts["time_limit"] = float(time_limit)
    res = milp(obj, constraints=cons, integrality=integrality, bounds=Bounds(lo, hi), options=opts)
    dual = getattr(res, "mip_dual_bound", None)
    print(f"  {len(binary)} binaries of {nv} variables; {res.message}", file=sys.stderr)
    return (dual, res.fun if res.x is not None else None)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plans", nargs="+", metavar="PLAN.json[.gz]")
    ap.add_argument("--whole", type=float, metavar="MB",
                    help="tensors of at least MB megabytes (10^6 B) are whole: a mixed-integer "
                         "program, whose dual bound HiGHS reports even when stopped")
    ap.add_argument("--time-limit", type=float, metavar="S", help="with --whole: stop after S seconds")
    ap.add_argument("--min-mb", type=float, default=0, metavar="MB",
                    help="leave out the tensors under MB megabytes (a relaxation: still a lower "
                         "bound, and a much smaller program for large graphs)")
    a = ap.parse_args()
    for path in a.plans:
        p = load(path)
        bw_h, bw_d, duplex = mechanism_of(p)
        recompute = p["options"].get("recompute", True)
        pr = p["statistics"]["prediction"]
        plan = f"plan {pr['step_time_us'] / 1e3:.1f} ms, bound.h {pr['bound_us'] / 1e3:.1f} ms"
        if a.whole is None:
            v, _ = lp_bound(p, bw_h, bw_d, duplex, recompute, min_bytes=a.min_mb * 1e6)
            lp = f"{v / 1e3:.1f} ms" if v is not None else "no optimum"
            print(f"{os.path.basename(path)}: LP bound {lp}, {plan}")
            continue
        dual, best = lp_bound(p, bw_h, bw_d, duplex, recompute, whole_bytes=a.whole * 1e6,
                              time_limit=a.time_limit, min_bytes=a.min_mb * 1e6)
        d = f"{dual / 1e3:.1f} ms" if dual is not None else "none"
        b = f"{best / 1e3:.1f} ms" if best is not None else "none"
        print(f"{os.path.basename(path)}: MIP bound {d} (tensors of {a.whole:g} MB and up whole; "
              f"best point {b}), {plan}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
