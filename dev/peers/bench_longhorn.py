#!/usr/bin/env python3
"""bench_longhorn.py: the Longhorn authors' CUDA scan (github Cranial-XIX/longhorn_cuda, a fork of
Mamba-1's selective scan: online_fwd / online_bwd) beside vil's scan on ViL-Tiny's shapes in one
run, and the authors' outputs and gradients checked against a float64 reference of
doc/scans.md's Longhorn recurrence, itself checked against vil's CPU scan (tools/scan_dump.c).

    sh dev/peers/longhorn_build.sh                   # the extension, into /tmp/longhorn_build
    python3 dev/peers/bench_longhorn.py [--ext DIR] [--vil-scan build/dev/cuda/scan]
                                        [--scan-dump build/tools/scan_dump] [--batch 256] [--iters 20]
    python3 dev/peers/bench_longhorn.py --dry-run --scan-dump build/cpu/tools/scan_dump   # CPU only

Steps: (1) the reference against vil's CPU scan (float32, B 2, L 197, E 64, N 16); (2) the mapping
below, run on a float64 emulation of the authors' two entry points written from their kernels'
equations (this checks the layouts, flips, halving and sums of this script, not their kernels);
(3, not with --dry-run) the authors' kernels in bf16 against the reference at the same shape;
(4) timing at B 256, L 197, E 384, N 16: the authors' forward and backward, one call per
direction (CUDA events, warmup, median), and vil's harness (`scan 2 B ITERS`: the backend's
bidirectional op, us per call of both directions). Closes with "N passed, N failed"; exit 1 when
a check failed (the timing still runs).

How the two conventions map, per direction j (0 forward, 1 reversed), vil -> authors:
  u (B, L, E)             -> u (B, E, L): transposed, same dtype as T, K, Q, z, dout (bf16 here)
  delta (B, L, E)         -> T (B, E, L) + t_bias (E, fp32): the kernel adds t_bias, then
                             beta = sigmoid(T + t_bias); vil's delta has dt_proj's bias in it
  k, q: x_dbl columns     -> K, Q (B, G=1, N, L)
  [dt_ld, dt_ld + 2N)
  Dskip (E) fp32          -> D (E) fp32
  the recurrence          -> the same: eps = beta / (1 + beta kappa), a = 1 - eps k^2,
                             h = a h + eps u k, y = q.h + D u (kappa = |k_t|^2 over the N states)
  reversed: vil indexes   -> the same kernel on token-flipped copies of u, T, K, Q, z, dout,
  token L-1-s at step s      its outputs flipped back (the authors' bi_longhorn_ref does this)
  out = 0.5 SiLU(z)       -> out_z = y SiLU(z) per direction, so vil's out is
        (y_0 + y_1)          0.5 (out_z_0 + flip(out_z_1)); online_fwd also returns the ungated y
                             (`out`, which online_bwd takes to form dz) and its chunk states x
  backward, dout          -> dout_j = 0.5 dout (flipped for j = 1), the gradient of out_z_j
  du, ddelta              -> du, dT (= d/d delta)
  dq (channel sum)        -> dQ (fp32 atomics, returned in Q's dtype)
  dk (channel sum)        -> dK + 2 K sum_E(dTK): the kernel's dK holds the direct term
                             sum_d lam eps (u - 2 k h_{t-1}) only; dTK (B, E, L) is each
                             channel's -deps beta^2 / (1 + beta kappa)^2, which the authors'
                             get_dk sums over channels and multiplies by 2K (in bf16 there;
                             the check does it in float64, so it sees the kernel's outputs)
  dz                      -> dz_0 + flip(dz_1)
  dD (accumulates)        -> dD (fresh, fp32), one per direction
  ddelta_sum (accumulates)-> dt_bias's gradient (fresh, fp32)
What differs in how (not what): the authors recover h_{t-1} by dividing,
(h_t - eps u k) / (a + 1e-10), where vil recomputes it from saved states; they scan the tokens as a
block-wide prefix scan of (a, b) pairs with one 32-thread block per (sample, channel) at L <= 256
and sum dK, dQ, dD, dt_bias with atomics (not deterministic); vil's op fuses both directions, the
gate and the average into one call each way and needs no flipped copies. The timing leaves the
transposes and flips out of the authors' calls (their inputs are laid out beforehand). Their own
bidirectional layer (bi_longhorn_ref) is another mixer (one conv, x_proj, dt_proj and D for both
directions, an RMSNorm per direction before one gate); only the scan kernels are compared here,
composed the way vil's op is.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

TOL_BF16 = 1e-2  # bf16 outputs against float64, as tests/gpu_ops.c and dev/cuda's harnesses
TOL_F32 = 1e-3   # the authors' fp32 sums over samples and tokens (dD)
TOL_CPU = 1e-4   # vil's float32 CPU scan against float64, as tools/torch_reference.py
TOL_EMU = 1e-9   # the emulation: float64 on both sides
KEYS = ["out", "dz"] + [f"{n}{j}" for j in (0, 1) for n in ("du", "ddelta", "dk", "dq", "dD", "ddelta_sum")]


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, name, got, ref, tol, must_differ=False):
        """rel L2 error of got against ref within tol (must_differ: above it, a check that the
        comparison sees a known difference)"""
        err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        ok = err > tol if must_differ else err <= tol
        self.passed += ok
        self.failed += not ok
        print(f"{name}: rel err {err:.3e} ({'must exceed' if must_differ else 'tol'} {tol:.0e}) {'OK' if ok else 'FAIL'}")

    def fail(self, name, why):
        self.failed += 1
        print(f"{name}: FAIL ({why})")

    def compare(self, label, got, ref, tol_of):
        for k in KEYS:
            self.check(f"{label} {k}", got[k], ref[k], tol_of(k))


# ---- the reference: doc/scans.md's Longhorn recurrence, float64, autograd for the gradients ----
def longhorn(u, delta, k, q, D, kappa_const=False):
    """one direction: u, delta (B, L, E); k, q (B, L, N); D (E) -> y (B, L, E). kappa_const
    cuts kappa's path to k (the gradient without dk's kappa term)"""
    beta = torch.sigmoid(delta)
    kappa = (k * k).sum(-1, keepdim=True)
    if kappa_const:
        kappa = kappa.detach()
    eps = beta / (1 + beta * kappa)
    h = u.new_zeros(u.shape[0], u.shape[2], k.shape[2])
    ys = []
    for t in range(u.shape[1]):
        e, kt = eps[:, t, :, None], k[:, t, None, :]
        h = (1 - e * kt * kt) * h + e * u[:, t, :, None] * kt
        ys.append((h * q[:, t, None, :]).sum(-1))
    return torch.stack(ys, 1) + D * u


def reference(inp, kappa_const=False):
    """vil's scan_bidir_forward / backward: out = 0.5 SiLU(z) (y_0 + y_1), direction 1 on the
    reversed tokens; the gradients of out against inp["dout"]"""
    x = {k: inp[k].double().detach().requires_grad_(True) for k in
         ("u0", "u1", "delta0", "delta1", "k0", "k1", "q0", "q1", "D0", "D1", "z")}
    y0 = longhorn(x["u0"], x["delta0"], x["k0"], x["q0"], x["D0"], kappa_const)
    f = [x[n].flip(1) for n in ("u1", "delta1", "k1", "q1")]
    y1 = longhorn(*f, x["D1"], kappa_const).flip(1)
    out = 0.5 * F.silu(x["z"]) * (y0 + y1)
    out.backward(inp["dout"].double())
    r = {"out": out.detach(), "dz": x["z"].grad}
    for j in (0, 1):
        r[f"du{j}"], r[f"ddelta{j}"] = x[f"u{j}"].grad, x[f"delta{j}"].grad
        r[f"dk{j}"], r[f"dq{j}"], r[f"dD{j}"] = x[f"k{j}"].grad, x[f"q{j}"].grad, x[f"D{j}"].grad
        r[f"ddelta_sum{j}"] = x[f"delta{j}"].grad.sum((0, 1))
    return r


# ---- vil's CPU scan (tools/scan_dump.c writes inputs and results as safetensors, read by
# tools/torch_reference.py's reader: the safetensors package where installed, a minimal one else) ----
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_reference import load_file  # noqa: E402


def load_safetensors(path):
    return {k: v.double() for k, v in load_file(path).items()}


def check_vil_cpu(checks, scan_dump):
    if not os.access(scan_dump, os.X_OK):
        checks.fail("vil cpu", f"{scan_dump} not found: `make {scan_dump}` builds it")
        return
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "scan.safetensors")
        rc = subprocess.run([scan_dump, path]).returncode
        if rc != 0:
            checks.fail("vil cpu", f"{scan_dump} exited {rc}")
            return
        vil = load_safetensors(path)
    print(f"vil's CPU scan (float32) against the float64 reference, B {vil['u0'].shape[0]}, "
          f"L {vil['u0'].shape[1]}, E {vil['u0'].shape[2]}, N {vil['k0'].shape[2]}:")
    ref = reference(vil)
    checks.compare("vil cpu", vil, ref, lambda k: TOL_CPU)
    # the comparison sees dk's kappa term: without it the reference must differ from vil
    cut = reference(vil, kappa_const=True)
    for j in (0, 1):
        checks.check(f"vil cpu dk{j} vs the reference without the kappa term", vil[f"dk{j}"], cut[f"dk{j}"],
                     TOL_CPU, must_differ=True)


# ---- the authors' entry points: the mapping, and an emulation of their equations ----
class Emulated:
    """online_fwd / online_bwd as the authors' kernels compute them (their argument order and
    layouts, u, T, z, dout (B, E, L), K, Q (B, 1, N, L)), in float64 on the CPU; x, the chunk
    states, stands in as every state (B, E, N, L)"""

    @staticmethod
    def _steps(u, K, T, t_bias):
        beta = torch.sigmoid(T + t_bias[:, None])
        k = K[:, 0]
        kappa = (k * k).sum(1)                           # (B, L)
        eps = beta / (1 + beta * kappa[:, None])         # (B, E, L)
        a = 1 - eps[:, :, None] * (k * k)[:, None]       # (B, E, N, L)
        b = (eps * u)[:, :, None] * k[:, None]
        return beta, kappa, eps, a, b

    @staticmethod
    def online_fwd(u, Q, K, T, D, t_bias, z):
        _, _, _, a, b = Emulated._steps(u, K, T, t_bias)
        H, h = torch.empty_like(a), torch.zeros_like(a[..., 0])
        for t in range(u.shape[2]):
            h = a[..., t] * h + b[..., t]
            H[..., t] = h
        y = (H * Q[:, 0][:, None]).sum(2) + D[:, None] * u
        return [y, H, y * F.silu(z)]

    @staticmethod
    def online_bwd(u, Q, K, T, D, t_bias, z, dout, x, out, dz):
        beta, kappa, eps, a, b = Emulated._steps(u, K, T, t_bias)
        H, k, L = x, K[:, 0], u.shape[2]
        sg = torch.sigmoid(z)
        dz = dout * out * sg * (1 + z * (1 - sg))
        g = dout * z * sg
        lam, Lam = torch.zeros_like(H[..., 0]), torch.empty_like(H)
        for t in reversed(range(L)):
            lam = g[:, :, None, t] * Q[:, 0][:, None, :, t] + (a[..., t + 1] * lam if t + 1 < L else 0)
            Lam[..., t] = lam
        hp = (H - b) / a                                 # h_{t-1} by division, as the kernel
        du = D[:, None] * g + (Lam * k[:, None] * eps[:, :, None]).sum(2)
        dK = (Lam * eps[:, :, None] * (u[:, :, None] - 2 * k[:, None] * hp)).sum(1, keepdim=True)
        deps = (Lam * (u[:, :, None] * k[:, None] - (k * k)[:, None] * hp)).sum(2)
        den2 = (1 + beta * kappa[:, None]) ** 2
        dTK = -deps * beta * beta / den2
        dT = deps / den2 * beta * (1 - beta)
        dQ = (g[:, :, None] * H).sum(1, keepdim=True)
        return [du, dQ, dK, dT, (g * u).sum((0, 2)), dz, dT.sum((0, 2)), dTK]


def to_authors(t, j):
    """(B, L, C) in vil's token order -> (B, C, L) in direction j's scan order"""
    return (t.flip(1) if j else t).transpose(1, 2)


def from_authors(t, j):
    """(B, C, L) in direction j's scan order -> (B, L, C) in vil's token order"""
    t = t.transpose(1, 2)
    return t.flip(1) if j else t


def authors_bidir(ops, inp, dev, dt, wdt):
    """vil's bidirectional op from two calls each way of the authors' entry points (ops): out
    and every gradient in vil's layout, float64 on the CPU; inp holds T and t_bias for delta"""
    r = {"out": 0, "dz": 0}
    for j in (0, 1):
        act = lambda t: to_authors(t, j).to(dev, dt).contiguous()
        u, T, z = act(inp[f"u{j}"]), act(inp[f"T{j}"]), act(inp["z"])
        K, Q = act(inp[f"k{j}"]).unsqueeze(1), act(inp[f"q{j}"]).unsqueeze(1)
        dout = act(0.5 * inp["dout"])
        D, tb = inp[f"D{j}"].to(dev, wdt), inp[f"tb{j}"].to(dev, wdt)
        y, x, yz = ops.online_fwd(u, Q, K, T, D, tb, z)[:3]
        du, dQ, dK, dT, dD, dz, dtb, dTK = ops.online_bwd(u, Q, K, T, D, tb, z, dout, x, y, None)
        dk = dK[:, 0].double() + 2 * K[:, 0].double() * dTK.double().sum(1, keepdim=True)
        back = lambda t: from_authors(t.double().cpu(), j)
        r["out"] = r["out"] + 0.5 * back(yz)
        r["dz"] = r["dz"] + back(dz)
        r[f"du{j}"], r[f"ddelta{j}"] = back(du), back(dT)
        r[f"dk{j}"], r[f"dq{j}"], r[f"dk_direct{j}"] = back(dk), back(dQ[:, 0]), back(dK[:, 0])
        r[f"dD{j}"], r[f"ddelta_sum{j}"] = dD.double().cpu(), dtb.double().cpu()
    return r


def make_inputs(B, L, E, N, seed):
    """bf16-exact activations (u, T, k, q, z, dout; k and q at half scale), fp32 D and t_bias; all
    as float64; delta = T + t_bias for the reference"""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s, scale=1.0: torch.randn(*s, generator=g, dtype=torch.float64) * scale
    bf = lambda *s, scale=1.0: rnd(*s, scale=scale).to(torch.bfloat16).double()
    inp = {"z": bf(B, L, E), "dout": bf(B, L, E)}
    for j in (0, 1):
        inp[f"u{j}"], inp[f"T{j}"] = bf(B, L, E), bf(B, L, E)
        inp[f"k{j}"], inp[f"q{j}"] = bf(B, L, N, scale=0.5), bf(B, L, N, scale=0.5)
        inp[f"D{j}"], inp[f"tb{j}"] = rnd(E).float().double(), rnd(E, scale=0.5).float().double()
        inp[f"delta{j}"] = inp[f"T{j}"] + inp[f"tb{j}"]
    return inp


def check_authors(checks, ops, label, dev, dt, wdt, tol_of):
    inp = make_inputs(2, 197, 64, 16, seed=35)
    ref = reference(inp)
    got = authors_bidir(ops, inp, dev, dt, wdt)
    print(f"{label} against the float64 reference, B 2, L 197, E 64, N 16:")
    checks.compare(label, got, ref, tol_of)
    # the kernel's own dK is dk without the kappa term
    cut = reference(inp, kappa_const=True)
    for j in (0, 1):
        checks.check(f"{label} dK{j} (their dK alone) vs the reference without the kappa term",
                     got[f"dk_direct{j}"], cut[f"dk{j}"], tol_of(f"dk{j}"))


# ---- timing ----
def median_us(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


def time_authors(ext, B, L, E, N, iters, warmup):
    """per layer (two directions): online_fwd with the gate, online_bwd, and online_bwd with the
    wrapper's get_dk (bf16), on inputs already in the authors' layout"""
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(35)
    rnd = lambda *s, scale=1.0: (torch.randn(*s, generator=g, device=dev) * scale).to(dt)
    dirs = []
    for _ in (0, 1):
        d = {"u": rnd(B, E, L), "T": rnd(B, E, L), "z": rnd(B, E, L), "dout": rnd(B, E, L),
             "K": rnd(B, 1, N, L, scale=0.5), "Q": rnd(B, 1, N, L, scale=0.5),
             "D": torch.randn(E, generator=g, device=dev), "tb": 0.5 * torch.randn(E, generator=g, device=dev)}
        d["y"], d["x"] = ext.online_fwd(d["u"], d["Q"], d["K"], d["T"], d["D"], d["tb"], d["z"])[:2]
        dirs.append(d)

    def fwd():
        for d in dirs:
            ext.online_fwd(d["u"], d["Q"], d["K"], d["T"], d["D"], d["tb"], d["z"])

    def bwd(dk=False):
        for d in dirs:
            r = ext.online_bwd(d["u"], d["Q"], d["K"], d["T"], d["D"], d["tb"], d["z"], d["dout"], d["x"], d["y"], None)
            if dk:
                r[2] + r[7].sum(1, keepdim=True).unsqueeze(1) * 2.0 * d["K"]

    return median_us(fwd, iters, warmup), median_us(bwd, iters, warmup), median_us(lambda: bwd(True), iters, warmup)


def time_vil(checks, harness, B, iters):
    """vil's harness, version 2 (the backend's op): validated against the CPU reference, then
    us per call of both directions"""
    if not os.access(harness, os.X_OK):
        checks.fail("vil harness", f"{harness} not found: `make dev-cuda` builds it")
        return None
    cmd = [harness, "2", str(B), str(iters)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    summary = [s for s in p.stdout.splitlines() if s.startswith("summary:")]
    us = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(fwd|bwd): ([0-9.]+) us/call", p.stdout, re.M)}
    if p.returncode != 0 or len(us) != 2:
        checks.fail("vil harness", f"`{' '.join(cmd)}` exited {p.returncode}: {(summary or p.stderr.splitlines() or [''])[-1]}")
        return None
    checks.passed += 1
    print(f"vil harness: {summary[-1] if summary else 'no summary line'} OK")
    return us["fwd"], us["bwd"], " ".join(cmd)


def load_ext(ext_dir):
    import importlib.util
    path = os.path.join(ext_dir, "online_selective_scan_cuda.so")
    spec = importlib.util.spec_from_file_location("online_selective_scan_cuda", path)
    if spec is None or not os.path.exists(path):
        raise FileNotFoundError(f"{path}: build it with `sh dev/peers/longhorn_build.sh`")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="the CPU checks only: the reference against vil's CPU scan, the mapping on the emulation")
    ap.add_argument("--ext", default=os.environ.get("LONGHORN_BUILD", "/tmp/longhorn_build") + "/ext",
                    help="the folder holding online_selective_scan_cuda.so (longhorn_build.sh's OUT/ext)")
    ap.add_argument("--vil-scan", default="build/dev/cuda/scan", help="vil's scan harness (make dev-cuda)")
    ap.add_argument("--scan-dump", default="build/tools/scan_dump", help="vil's CPU scan on random inputs (make)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    L, E, N = 197, 384, 16
    checks = Checks()
    check_vil_cpu(checks, a.scan_dump)
    check_authors(checks, Emulated, "emulated authors", "cpu", torch.float64, torch.float64, lambda k: TOL_EMU)
    if not a.dry_run:
        ext = load_ext(a.ext)
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
        check_authors(checks, ext, "authors cuda", "cuda", torch.bfloat16, torch.float32,
                      lambda k: TOL_F32 if k.startswith("dD") else TOL_BF16)
        vil = time_vil(checks, a.vil_scan, a.batch, a.iters)
        f, b, bk = time_authors(ext, a.batch, L, E, N, a.iters, a.warmup)
        print(f"authors (online_fwd / online_bwd, one call per direction, bf16), B {a.batch}, L {L}, E {E}, N {N}, "
              f"per layer: fwd {f:,.1f} us, bwd {b:,.1f} us, bwd with get_dk {bk:,.1f} us "
              f"(median of {a.iters}, CUDA events)")
        if vil:
            vf, vb, cmd = vil
            print(f"vil (`{cmd}`), per layer: fwd {vf:,.1f} us, bwd {vb:,.1f} us (mean of {a.iters} back-to-back calls)")
            print(f"authors / vil: fwd {f / vf:.2f}x, bwd {b / vb:.2f}x (with get_dk {bk / vb:.2f}x); "
                  f"bwd / fwd: authors {b / f:.2f}, vil {vb / vf:.2f}")
    print(f"{checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
