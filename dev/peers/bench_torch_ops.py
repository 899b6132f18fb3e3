#!/usr/bin/env python3
"""bench_torch_ops.py: vil from PyTorch (the vil package, python/vil) measured in one call on the
GPU machine, one line per measurement (issue 48, item 5):

  1. the bidirectional scan's forward and backward at ViL-Tiny's shapes (B 256, L 197, E 384,
     N 16; x_dbl rows 48 wide with k at column 16) called from PyTorch through vil.ops.scan_bidir
     (bf16 tensors, torch's current stream; the backward through autograd, torch.autograd.grad),
     for Longhorn and Mamba, with z a tensor of its own (as vil.Classifier gives it) and with z a
     view of the (B, L, 2E) in_proj output; and vil.ops.conv1d_silu_bidir (K 4);
  2. the same kernels from vil's own harnesses (build/dev/cuda/scan 2 B ITERS [--rec mamba], with
     the states the model's forward keeps for its backward and without them (--no-states: what
     the C API's backward does, so the bridge's overhead is the ratio to this line);
     build/dev/cuda/conv1d 2 B ITERS);
  3. the Longhorn authors' kernels (longhorn_cuda's online_fwd / online_bwd, one call per
     direction, built by dev/peers/longhorn_build.sh; dev/peers/bench_longhorn.py's timing);
  4. mamba_ssm's selective_scan from the official ViM's fork (selective_scan_fn: one call per
     direction with the z gate and the dt bias, softplus; backward through autograd; built by
     dev/peers/vim_build.sh, checked against vil's float64 reference first);
  5. the plain PyTorch reference of the same math (vil.ops.scan_bidir_reference, float32 inside,
     autograd), fewer iterations;
  6. a ViL-Tiny training step in PyTorch with vil.ops (vil.Classifier, bf16 autocast, fused AdamW,
     cross-entropy, batch 256, 224 px), eager and as one CUDA graph a step, against `vil bench
     --device cuda --model configs/vil_tiny.cfg --batch 256` and the official ViM-Tiny (hustvl/Vim's
     vim_tiny_patch16_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2 from
     --vim-repo, a plain copy of the repository, and the extensions in --vim-ext), eager as its
     training script runs it and graphed where its kernels capture.

Targets (README "Using vil from PyTorch"): the scan through PyTorch within 5% of the harness
(--no-states); the PyTorch ViL-Tiny step at least 3x the official ViM-Tiny's.

    make && make dev-cuda && sh dev/peers/longhorn_build.sh && sh dev/peers/vim_build.sh
    python3 dev/peers/bench_torch_ops.py [--batch 256] [--iters 20] [--vim-repo .peers/Vim]
                                         [--skip reference,vim,...] [--step-batch 256] [--compile]
A peer that is not there is a line saying why ("skip ..."), never a failure; a failed check of
vil.ops against the reference (bf16 tolerance) is a FAIL line and exit 1."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, HERE)
import vil  # noqa: E402

L_TOK, E, N, D_MODEL, R, DT_LD, XDBL_LD = 197, 384, 16, 192, 12, 16, 48
failed = 0


def line(s):
    print(s, flush=True)


def wall_us(fn, iters, warmup=5):
    """us per call of iters back-to-back calls, synchronized on both sides (as the harness's h_time)"""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def event_us(fn, iters, warmup=5):
    """median of iters CUDA-event intervals around one call (the device's time, host gaps included)"""
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


# ---- the scan's inputs in the model's layout ----
def scan_inputs(rec, B, seed=0, dev="cuda", z_view=False):
    g = torch.Generator(device=dev).manual_seed(seed)
    bf = lambda *s, scale=1.0: (torch.randn(*s, generator=g, device=dev) * scale).to(torch.bfloat16)  # noqa: E731
    u = [bf(B, L_TOK, E).requires_grad_(True) for _ in range(2)]
    d = [bf(B, L_TOK, E).requires_grad_(True) for _ in range(2)]
    x = [bf(B, L_TOK, XDBL_LD, scale=0.5).requires_grad_(True) for _ in range(2)]
    xz = bf(B, L_TOK, 2 * E).requires_grad_(True)
    D = [torch.randn(E, generator=g, device=dev).requires_grad_(True) for _ in range(2)]
    A = None
    if rec == "mamba":
        A = [(torch.log(torch.arange(1, N + 1, device=dev, dtype=torch.float32)).expand(E, N) +
              0.1 * torch.randn(E, N, generator=g, device=dev)).requires_grad_(True) for _ in range(2)]
    dout = bf(B, L_TOK, E)
    z = xz[..., E:] if z_view else xz[..., E:].detach().contiguous().requires_grad_(True)
    return dict(u=u, d=d, x=x, xz=xz, z=z, D=D, A=A, dout=dout,
                leaves=u + d + x + [xz if z_view else z] + D + (A or []))


def call(fn, t, rec):
    return fn(t["u"], t["d"], t["x"], t["z"], t["D"], t["A"], recurrence=rec, dt_ld=DT_LD, N=N)


def check_ops(rec):
    """vil.ops against the reference at a small size first: a timing of wrong results is worth nothing"""
    global failed
    t = scan_inputs(rec, 2, seed=1, z_view=True)
    out = call(vil.ops.scan_bidir, t, rec)
    grads = torch.autograd.grad(out, t["leaves"], t["dout"])
    td = {k: ([a.detach().double().requires_grad_(True) for a in v] if isinstance(v, list) else v)
          for k, v in t.items() if k in ("u", "d", "x", "D", "A")}
    td["xz"] = t["xz"].detach().double().requires_grad_(True)
    td["z"] = td["xz"][..., E:]
    ref = call(vil.ops.scan_bidir_reference, td, rec)
    leaves = td["u"] + td["d"] + td["x"] + [td["xz"]] + td["D"] + (td["A"] or [])
    rgrads = torch.autograd.grad(ref, leaves, t["dout"].double())
    errs = [((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item() for a, b in zip([out] + list(grads),
                                                                                            [ref] + list(rgrads))]
    ok = max(errs) <= 1e-2
    failed += not ok
    line(f"{'check' if ok else 'FAIL'} vil.ops {rec} against the float64 reference (B 2): worst rel err "
         f"{max(errs):.2e} over out and {len(grads)} gradients (tol 1e-2)")
    return ok


def time_vil_ops(rec, B, iters):
    """the op as vil.Classifier calls it (z a tensor of its own: in_proj runs as its two halves),
    and with z a view of the (B, L, 2E) in_proj output (autograd then scatters z's gradient into a
    zeroed buffer of that shape: its SliceBackward, outside the op)"""
    res = {}
    for z_view in (False, True):
        t = scan_inputs(rec, B, z_view=z_view)
        with torch.no_grad():
            fwd = wall_us(lambda: call(vil.ops.scan_bidir, t, rec), iters)
        out = call(vil.ops.scan_bidir, t, rec)
        bwd = wall_us(lambda: torch.autograd.grad(out, t["leaves"], t["dout"], retain_graph=True), iters)
        line(f"vil.ops {rec}, z {'a view of xz' if z_view else 'a tensor of its own (as the model)'}: fwd {fwd:,.1f} us, "
             f"bwd {bwd:,.1f} us per call of both directions, B {B}, L {L_TOK}, E {E}, N {N} "
             f"(autograd.grad; mean of {iters} back-to-back calls)")
        res[z_view] = (fwd, bwd)
    return res[False]


def time_conv(harness, B, iters):
    """vil.ops.conv1d_silu_bidir (ViL-Tiny: K 4, x a tensor of its own, as the model) against its
    harness (build/dev/cuda/conv1d 2 B ITERS, x rows of 2E as vil's model)"""
    g = torch.Generator(device="cuda").manual_seed(4)
    x = torch.randn(B, L_TOK, E, generator=g, device="cuda").to(torch.bfloat16).requires_grad_(True)
    w = [(0.3 * torch.randn(E, 1, 4, generator=g, device="cuda")).requires_grad_(True) for _ in range(2)]
    b = [(0.1 * torch.randn(E, generator=g, device="cuda")).requires_grad_(True) for _ in range(2)]
    du = [torch.randn(B, L_TOK, E, generator=g, device="cuda").to(torch.bfloat16) for _ in range(2)]
    with torch.no_grad():
        fwd = wall_us(lambda: vil.ops.conv1d_silu_bidir(x, w, b), iters)
    u = vil.ops.conv1d_silu_bidir(x, w, b)
    bwd = wall_us(lambda: torch.autograd.grad(u, [x, *w, *b], du, retain_graph=True), iters)
    line(f"vil.ops conv1d_silu_bidir: fwd {fwd:,.1f} us, bwd {bwd:,.1f} us (B {B}, L {L_TOK}, E {E}, K 4; "
         f"mean of {iters})")
    if not os.access(harness, os.X_OK):
        line(f"skip the conv harness: {harness} not built (`make dev-cuda`)")
        return
    p = subprocess.run([harness, "2", str(B), str(iters)], capture_output=True, text=True)
    us = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(fwd|bwd): ([0-9.]+) us/call", p.stdout, re.M)}
    if p.returncode != 0 or len(us) != 2:
        global failed
        failed += 1
        line(f"FAIL conv harness `{harness} 2 {B} {iters}` exited {p.returncode}")
        return
    line(f"vil harness conv1d (`{harness} 2 {B} {iters}`): fwd {us['fwd']:,.1f} us, bwd {us['bwd']:,.1f} us; "
         f"bridge overhead fwd {fwd / us['fwd']:.3f}x, bwd {bwd / us['bwd']:.3f}x")


def time_harness(harness, rec, B, iters):
    res = {}
    for states in (True, False):
        cmd = [harness, "2", str(B), str(iters)] + (["--rec", rec]) + ([] if states else ["--no-states"])
        if not os.access(harness, os.X_OK):
            line(f"skip vil harness: {harness} not built (`make dev-cuda`)")
            return None
        p = subprocess.run(cmd, capture_output=True, text=True)
        us = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(fwd|bwd): ([0-9.]+) us/call", p.stdout, re.M)}
        summ = [s for s in p.stdout.splitlines() if s.startswith("summary")]
        if p.returncode != 0 or len(us) != 2:
            line(f"FAIL vil harness `{' '.join(cmd)}` exited {p.returncode}: {(summ or p.stderr.splitlines() or [''])[-1]}")
            global failed
            failed += 1
            return None
        res[states] = us
        line(f"vil harness {rec} (`{' '.join(cmd)}`): fwd {us['fwd']:,.1f} us, bwd {us['bwd']:,.1f} us "
             f"({'the forward keeps its chunk states for the backward' if states else 'no kept states, as the C API'}); "
             f"{summ[-1] if summ else ''}")
    return res


def time_longhorn_cuda(ext_dir, B, iters):
    try:
        from bench_longhorn import load_ext, time_authors
        ext = load_ext(ext_dir)
    except Exception as e:  # noqa: BLE001
        line(f"skip longhorn_cuda: {e} (sh dev/peers/longhorn_build.sh builds it from .peers/longhorn_cuda)")
        return None
    f, b, bk = time_authors(ext, B, L_TOK, E, N, iters, 5)
    line(f"longhorn_cuda (online_fwd / online_bwd, one call per direction, bf16): fwd {f:,.1f} us, bwd {b:,.1f} us, "
         f"bwd with the wrapper's get_dk {bk:,.1f} us (median of {iters}, CUDA events; inputs laid out beforehand)")
    return f, bk


def check_mamba_ssm(peer):
    """mamba_ssm's selective_scan_fn (fp32, small) against vil's float64 Mamba reference of one
    direction with the z gate: out = y * SiLU(z), delta = softplus(delta + bias)"""
    global failed
    dev, B, L, Ek, Nk = "cuda", 2, 23, 8, 4
    g = torch.Generator(device=dev).manual_seed(5)
    r = lambda *s, scale=1.0: torch.randn(*s, generator=g, device=dev) * scale  # noqa: E731
    u, delta, z, Bm, Cm = r(B, Ek, L), r(B, Ek, L), r(B, Ek, L), r(B, Nk, L, scale=0.5), r(B, Nk, L, scale=0.5)
    A_log, D, bias = torch.log(torch.arange(1, Nk + 1.0, device=dev)).expand(Ek, Nk).contiguous() + 0.1 * r(Ek, Nk), r(Ek), r(Ek)
    out = peer.selective_scan_fn(u, delta, -torch.exp(A_log), Bm, Cm, D, z=z, delta_bias=bias, delta_softplus=True)
    t = lambda x: x.double().transpose(1, 2)  # noqa: E731 (B, E, L) -> (B, L, E)
    y = vil.ops.mamba_scan(t(u), t(delta) + bias.double(), t(Bm), t(Cm), A_log.double(), D.double())
    ref = (y * F.silu(t(z))).transpose(1, 2)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    ok = err <= 1e-4
    failed += not ok
    line(f"{'check' if ok else 'FAIL'} mamba_ssm selective_scan_fn (fp32) against vil's float64 Mamba reference: "
         f"rel err {err:.2e} (tol 1e-4)")
    return ok


def time_mamba_ssm(peer, B, iters):
    if peer is None or not check_mamba_ssm(peer):
        return None
    selective_scan_fn = peer.selective_scan_fn
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(3)
    bf = lambda *s, scale=1.0: (torch.randn(*s, generator=g, device=dev) * scale).to(torch.bfloat16)  # noqa: E731
    dirs = []
    for _ in range(2):  # each direction on inputs already in its layout and order (no flips timed)
        d = {"u": bf(B, E, L_TOK), "delta": bf(B, E, L_TOK), "z": bf(B, E, L_TOK),
             "B": bf(B, N, L_TOK, scale=0.5), "C": bf(B, N, L_TOK, scale=0.5),
             "A": -torch.exp(torch.log(torch.arange(1, N + 1, device=dev, dtype=torch.float32)).expand(E, N).contiguous()),
             "D": torch.randn(E, device=dev), "bias": 0.5 * torch.randn(E, device=dev), "dout": bf(B, E, L_TOK)}
        for k in ("u", "delta", "z", "B", "C", "A", "D", "bias"):
            d[k].requires_grad_(True)
        dirs.append(d)

    def fwd():
        return [selective_scan_fn(d["u"], d["delta"], d["A"], d["B"], d["C"], d["D"], z=d["z"], delta_bias=d["bias"],
                                  delta_softplus=True) for d in dirs]
    with torch.no_grad():
        f = wall_us(fwd, iters)
    outs = fwd()
    leaves = [[d[k] for k in ("u", "delta", "z", "B", "C", "A", "D", "bias")] for d in dirs]

    def bwd():
        for o, d, lv in zip(outs, dirs, leaves):
            torch.autograd.grad(o, lv, d["dout"], retain_graph=True)
    b = wall_us(bwd, iters)
    line(f"mamba_ssm selective_scan (selective_scan_fn with z and the dt bias, one call per direction, bf16): "
         f"fwd {f:,.1f} us, bwd {b:,.1f} us (autograd.grad; mean of {iters} back-to-back calls; no flips timed)")
    return f, b


def time_reference(rec, B, iters):
    t = scan_inputs(rec, B)
    try:
        with torch.no_grad():
            f = wall_us(lambda: call(vil.ops.scan_bidir_reference, t, rec), iters, warmup=1)
        torch.cuda.reset_peak_memory_stats()
        out = call(vil.ops.scan_bidir_reference, t, rec)
        b = wall_us(lambda: torch.autograd.grad(out, t["leaves"], t["dout"], retain_graph=True), iters, warmup=1)
        peak = torch.cuda.max_memory_allocated() / 2**30
    except torch.cuda.OutOfMemoryError if hasattr(torch.cuda, "OutOfMemoryError") else RuntimeError as e:
        line(f"skip the PyTorch reference {rec} at B {B}: {str(e)[:120]}")
        return None
    line(f"PyTorch reference {rec} (vil.ops.scan_bidir_reference, a loop over the tokens, float32 inside): "
         f"fwd {f:,.1f} us, bwd {b:,.1f} us (mean of {iters}; {peak:.1f} GiB kept for its backward)")
    return f, b


# ---- training steps ----
def step_rate(model, B, img, steps, warmup, graphed=False):
    """img/s and peak GiB of a bf16-autocast training step (cross-entropy, fused AdamW); graphed:
    the whole step captured in one CUDA graph and replayed (python/tests/gpu_ops.py's
    graphed_train_step, torch's recipe), which takes the host's launch overhead out of the step"""
    dev = "cuda"
    x = torch.randn(B, 3, img, img, device=dev)
    y = torch.randint(0, 1000, (B,), device=dev)
    model.train()
    torch.cuda.reset_peak_memory_stats()
    if graphed:
        sys.path.insert(0, os.path.join(REPO, "python", "tests"))
        from gpu_ops import graphed_train_step
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=True, capturable=True)
        replay, _ = graphed_train_step(model, opt, x, y, warmup=3)
        s = wall_us(replay, steps, warmup) / 1e6
        return B / s, torch.cuda.max_memory_allocated() / 2**30
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=True)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    s = wall_us(step, steps, warmup) / 1e6
    return B / s, torch.cuda.max_memory_allocated() / 2**30


def vil_bench(vil_bin, B):
    cmd = [vil_bin, "bench", "--device", "cuda", "--model", os.path.join(REPO, "configs", "vil_tiny.cfg"),
           "--batch", str(B), "--no-profile"]
    if not os.access(vil_bin, os.X_OK):
        line(f"skip vil bench: {vil_bin} not built")
        return None
    p = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"^train step \(as vil train\):\s+([0-9.]+) images/s", p.stdout, re.M)
    if p.returncode != 0 or not m:
        line(f"skip vil bench: `{' '.join(cmd)}` exited {p.returncode}: {(p.stderr.splitlines() or [''])[-1]}")
        return None
    peak = re.search(r"^peak memory \(training\):\s+([0-9.]+) GiB", p.stdout, re.M)
    line(f"vil bench ViL-Tiny (`{' '.join(cmd[1:])}`): train step {float(m.group(1)):,.0f} img/s "
         f"(forward, backward, AdamW, EMA){', peak ' + peak.group(1) + ' GiB' if peak else ''}")
    return float(m.group(1))


def official_vim(peer, B, steps, warmup):
    """the official ViM-Tiny's step as its training script runs it (eager), and captured in one
    CUDA graph as the PyTorch ViL-Tiny's graphed line is (where its kernels capture)"""
    res = {}
    for graphed in (False, True):
        try:
            model = peer.create_vim_tiny(num_classes=1000).cuda()
            r, peak = step_rate(model, B, 224, steps, warmup, graphed=graphed)
        except Exception as e:  # noqa: BLE001
            line(f"skip official ViM-Tiny{' graphed' if graphed else ''}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        finally:
            model = None
            torch.cuda.empty_cache()
        line(f"official ViM-Tiny ({peer.name}, bf16 autocast, fused AdamW, B {B}){', one CUDA graph a step' if graphed else ''}: "
             f"train step {r:,.0f} img/s, peak {peak:.2f} GiB")
        res[graphed] = r
    return res.get(False), res.get(True)


def load_peer(repo, ext):
    """the official ViM's modules (dev/peers/vim_peer.py), or None with a skip line saying why"""
    if not repo:
        line("skip mamba_ssm and the official ViM-Tiny: no --vim-repo (sh dev/peers/vim_build.sh builds their "
             "kernels from a copy of hustvl/Vim in .peers/Vim); the last measurement: 1,101 img/s on the H100")
        return None
    try:
        import vim_peer
        peer = vim_peer.setup(repo, ext)
    except Exception as e:  # noqa: BLE001
        line(f"skip mamba_ssm and the official ViM-Tiny: {type(e).__name__}: {e}")
        return None
    line(f"official ViM: {repo} ({open(os.path.join(repo, 'COMMIT')).read().strip() if os.path.exists(os.path.join(repo, 'COMMIT')) else 'no COMMIT file'}), "
         f"extensions from {ext}")
    return peer


def main():
    global failed
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=256, help="the scans' batch")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ref-batch", type=int, default=256, help="the PyTorch reference's batch")
    ap.add_argument("--ref-iters", type=int, default=3)
    ap.add_argument("--step-batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--vil-scan", default=os.path.join(REPO, "build", "dev", "cuda", "scan"))
    ap.add_argument("--vil-conv", default=os.path.join(REPO, "build", "dev", "cuda", "conv1d"))
    ap.add_argument("--vil-bin", default=os.path.join(REPO, "bin", "vil"))
    ap.add_argument("--ext", default=os.environ.get("LONGHORN_BUILD", "/tmp/longhorn_build") + "/ext")
    ap.add_argument("--vim-repo", default=None, help="a plain copy of hustvl/Vim (.peers/Vim)")
    ap.add_argument("--vim-ext", default=os.environ.get("VIM_BUILD", "/tmp/vim_build") + "/ext",
                    help="the folder vim_build.sh left selective_scan_cuda.so and causal_conv1d_cuda.so in")
    ap.add_argument("--skip", default="", help="comma-separated: ops,harness,longhorn,mamba_ssm,reference,step,bench,vim")
    ap.add_argument("--compile", action="store_true",
                    help="also the PyTorch ViL-Tiny step with torch.compile (the scan stays vil's, between graphs)")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    if not torch.cuda.is_available():
        line("bench_torch_ops.py needs a CUDA GPU (torch sees none)")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    line(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {vil.library_version()} ({vil.library_path()})")
    ops, harness = {}, {}
    for rec in ("longhorn", "mamba"):
        if "ops" not in skip and check_ops(rec):
            ops[rec] = time_vil_ops(rec, a.batch, a.iters)
        if "harness" not in skip:
            harness[rec] = time_harness(a.vil_scan, rec, a.batch, a.iters)
        if rec in ops and harness.get(rec):
            fo, bo = ops[rec]
            h = harness[rec][False]
            line(f"bridge overhead {rec}: vil.ops / harness (--no-states): fwd {fo / h['fwd']:.3f}x, "
                 f"bwd {bo / h['bwd']:.3f}x (target <= 1.05)")
    if "ops" not in skip:
        time_conv(a.vil_conv, a.batch, a.iters)
    if "longhorn" not in skip:
        lc = time_longhorn_cuda(a.ext, a.batch, a.iters)
        if lc and "longhorn" in ops:
            line(f"longhorn_cuda / vil.ops: fwd {lc[0] / ops['longhorn'][0]:.2f}x, bwd {lc[1] / ops['longhorn'][1]:.2f}x")
    peer = load_peer(a.vim_repo, a.vim_ext) if not {"mamba_ssm", "vim"} <= skip else None
    if "mamba_ssm" not in skip:
        ms = time_mamba_ssm(peer, a.batch, a.iters)
        if ms and "mamba" in ops:
            line(f"mamba_ssm / vil.ops (mamba): fwd {ms[0] / ops['mamba'][0]:.2f}x, bwd {ms[1] / ops['mamba'][1]:.2f}x")
    if "reference" not in skip:
        for rec in ("longhorn", "mamba"):
            rf = time_reference(rec, a.ref_batch, a.ref_iters)
            if rf and rec in ops and a.ref_batch == a.batch:
                line(f"PyTorch reference / vil.ops ({rec}): fwd {rf[0] / ops[rec][0]:.1f}x, bwd {rf[1] / ops[rec][1]:.1f}x")
            torch.cuda.empty_cache()
    rate = rate_g = None
    if "step" not in skip:
        model = vil.Classifier(vil.make_config(name="vil_tiny")).cuda()
        rate, peak = step_rate(model, a.step_batch, 224, a.steps, a.warmup)
        line(f"PyTorch ViL-Tiny with vil.ops (vil.Classifier, bf16 autocast, fused AdamW, B {a.step_batch}, 224 px): "
             f"train step {rate:,.0f} img/s, peak {peak:.2f} GiB")
        model = vil.Classifier(vil.make_config(name="vil_tiny")).cuda()
        try:
            rate_g, peak = step_rate(model, a.step_batch, 224, a.steps, a.warmup, graphed=True)
            line(f"PyTorch ViL-Tiny with vil.ops, one CUDA graph a step (torch.cuda.graph of forward, backward and "
                 f"AdamW): train step {rate_g:,.0f} img/s, peak {peak:.2f} GiB")
        except Exception as e:  # noqa: BLE001
            line(f"FAIL the graphed PyTorch ViL-Tiny step: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            failed += 1
        if a.compile:
            try:
                model = vil.Classifier(vil.make_config(name="vil_tiny")).cuda()
                cr, cpeak = step_rate(torch.compile(model), a.step_batch, 224, a.steps, a.warmup)
                line(f"PyTorch ViL-Tiny with vil.ops, torch.compile: train step {cr:,.0f} img/s, peak {cpeak:.2f} GiB")
            except Exception as e:  # noqa: BLE001
                line(f"skip torch.compile: {type(e).__name__}: {str(e)[:200]}")
        del model
        torch.cuda.empty_cache()
    if "bench" not in skip:
        vb = vil_bench(a.vil_bin, a.step_batch)
        if vb and rate:
            line(f"PyTorch ViL-Tiny / vil bench: eager {rate / vb:.2f}x" + (f", graphed {rate_g / vb:.2f}x" if rate_g else ""))
    if "vim" not in skip and peer is not None:
        vr, vr_g = official_vim(peer, a.step_batch, a.steps, a.warmup)
        for mine, what in ((rate, "eager"), (rate_g, "one CUDA graph a step")):
            if mine and vr:
                line(f"PyTorch ViL-Tiny ({what}) / official ViM-Tiny (eager, as its training script runs): "
                     f"{mine / vr:.2f}x (target >= 3)")
            if mine and vr_g and what != "eager":
                line(f"PyTorch ViL-Tiny / official ViM-Tiny, both one CUDA graph a step: {mine / vr_g:.2f}x")
    line(f"bench_torch_ops: {'all checks passed' if not failed else f'{failed} FAILED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
