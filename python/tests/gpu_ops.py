"""gpu_ops.py (make test-gpu, through tests/gpu_python.sh): vil.ops on vil's CUDA kernels and the
module on a GPU. The scans against the float64 reference for bf16 inputs (as the kernels take
them) and for float32, float16 and float64 ones (converted by the bridge), over a table of named
cases (ViL-Tiny's shapes, one token, channels that are not a multiple of 32, N 4 / 8 / 16, the
chunked kernels at L 730, z inside xz); against vil's CPU scan; torch's current stream and
device (a side stream racing a slow kernel, another GPU while the first is current); a CUDA
graph capture of the forward and backward, replayed on new inputs and after a larger shape
ran eagerly, and a capture of a shape never run refused with its message; a bf16-autocast
training step of the module against the same step on the plain PyTorch scan. Prints "skip" and
"0 passed, 0 failed" where torch sees no GPU.
Run: python3 python/tests/gpu_ops.py [NAME]"""
import os
import subprocess
import sys
import textwrap

from common import REPO, rel, run_tests, torch, vil

ops = vil.ops
TOL_BF16 = 1e-2  # bf16 outputs against float64, as tests/gpu_ops.c and dev/cuda's harnesses
DEV = "cuda"


def make_inputs(rec, B, L, E, N, dt_ld, width=None, seed=0, dtype=torch.bfloat16, z_view=True):
    """inputs that bf16 holds exactly (so every dtype gives the kernels the same values): u, delta,
    z, dout standard normal, k and q at half scale; D and A_log float32 (Mamba: S4D-real, perturbed)"""
    g = torch.Generator().manual_seed(seed)
    W = width or dt_ld + 2 * N
    bf = lambda *s, scale=1.0: (torch.randn(*s, generator=g) * scale).to(torch.bfloat16).double()  # noqa: E731
    raw = {"u": [bf(B, L, E) for _ in range(2)], "d": [bf(B, L, E) for _ in range(2)],
           "x": [bf(B, L, W, scale=0.5) for _ in range(2)], "xz": bf(B, L, 2 * E), "dout": bf(B, L, E),
           "D": [torch.randn(E, generator=g).double() for _ in range(2)]}
    if vil.reference.OWN_PARAM[rec]:
        raw["A"] = [(torch.log(torch.arange(1, N + 1).double()).expand(E, N) +
                     0.1 * torch.randn(E, N, generator=g).double()).float().double() for _ in range(2)]
    return dict(raw=raw, rec=rec, N=N, dt_ld=dt_ld, E=E, z_view=z_view)


def leaves_of(inp, dev, act_dtype, par_dtype):
    r = inp["raw"]
    mk = lambda t, dt: t.to(dev, dt, copy=True).requires_grad_(True)  # noqa: E731
    u = [mk(t, act_dtype) for t in r["u"]]
    d = [mk(t, act_dtype) for t in r["d"]]
    x = [mk(t, act_dtype) for t in r["x"]]
    xz = mk(r["xz"], act_dtype)
    E = inp["E"]
    z = xz[..., E:] if inp["z_view"] else xz[..., E:].detach().clone().requires_grad_(True)
    zleaf = xz if inp["z_view"] else z
    D = [mk(t, par_dtype) for t in r["D"]]
    A = [mk(t, par_dtype) for t in r["A"]] if "A" in r else None
    return dict(u=u, d=d, x=x, z=z, D=D, A=A, leaves=u + d + x + [zleaf] + D + (A or []), dout=r["dout"])


def run(fn, L):
    out = fn(L["u"], L["d"], L["x"], L["z"], L["D"], L["A"], recurrence=L["rec"], dt_ld=L["dt_ld"], N=L["N"])
    out.backward(L["dout"].to(out.device, out.dtype))
    return out.detach(), [t.grad for t in L["leaves"]]


def with_meta(L, inp):
    return dict(L, rec=inp["rec"], dt_ld=inp["dt_ld"], N=inp["N"])


NAMES = ["u0", "u1", "delta0", "delta1", "xdbl0", "xdbl1", "z", "D0", "D1", "A_log0", "A_log1"]

# name: (recurrence, B, L, E, N, dt_ld, options)
CASES = {
    "longhorn_vil_tiny": ("longhorn", 2, 197, 384, 16, 12, {}),   # x_proj's dense rows (R 12), z inside xz
    "mamba_vim_tiny": ("mamba", 2, 197, 384, 16, 12, {}),
    "longhorn_padded_rows": ("longhorn", 2, 197, 384, 16, 16, {"width": 48}),  # vil's own x_dbl layout
    "longhorn_one_token": ("longhorn", 3, 1, 64, 16, 12, {}),
    "mamba_one_token": ("mamba", 3, 1, 64, 16, 12, {}),
    "longhorn_E70_N8": ("longhorn", 2, 33, 70, 8, 0, {"z_view": False}),
    "mamba_E70_N4": ("mamba", 2, 33, 70, 4, 3, {}),
    "longhorn_L730": ("longhorn", 1, 730, 64, 16, 4, {}),  # the token-parallel chunked kernels
    "mamba_L730": ("mamba", 1, 730, 64, 16, 4, {}),
}


def reference(inp):
    L = with_meta(leaves_of(inp, DEV, torch.float64, torch.float64), inp)
    return run(ops.scan_bidir_reference, L)


def test_every_recurrence_has_a_case(T):
    for rec in ops.RECURRENCES:
        T.ok(f"{rec} in the case table", any(c[0] == rec for c in CASES.values()))


def test_cuda_against_reference(T):
    for name, (rec, B, Lq, E, N, dt_ld, o) in CASES.items():
        inp = make_inputs(rec, B, Lq, E, N, dt_ld, **o)
        ref_out, ref_grads = reference(inp)
        dts = (torch.bfloat16, torch.float32) if "tiny" in name or "one_token" in name else (torch.bfloat16,)
        for dt in dts:
            L = with_meta(leaves_of(inp, DEV, dt, torch.float32), inp)
            out, grads = run(ops.scan_bidir, L)
            tag = f"{name} {str(dt)[6:]}"
            T.close(f"{tag} out", out, ref_out, TOL_BF16)
            T.equal(f"{tag} out dtype", out.dtype, dt)
            names = NAMES if L["A"] else NAMES[:9]
            for n, g, rg in zip(names, grads, ref_grads):
                T.close(f"{tag} d{n}", g, rg, TOL_BF16)
            T.ok(f"{tag} gradients in their inputs' dtypes", all(g.dtype == t.dtype for g, t in zip(grads, L["leaves"])))


def test_other_dtypes(T):
    """float16 and float64 activations: converted to bf16 for the kernels, answered in their dtype;
    float64 D and A_log: converted to float32"""
    inp = make_inputs("mamba", 2, 40, 96, 16, 12)
    ref_out, ref_grads = reference(inp)
    for act, par in ((torch.float16, torch.float32), (torch.float64, torch.float64)):
        L = with_meta(leaves_of(inp, DEV, act, par), inp)
        out, grads = run(ops.scan_bidir, L)
        T.equal(f"{act} out dtype", out.dtype, act)
        T.close(f"{act} out", out, ref_out, TOL_BF16)
        T.close(f"{act} dA_log0", grads[9], ref_grads[9], TOL_BF16)
        T.equal(f"{act} dD0 dtype", grads[7].dtype, par)


def test_cuda_against_cpu(T):
    """the same bf16-exact inputs through vil's CPU scan (float32) and its CUDA kernels (bf16)"""
    for rec in ops.RECURRENCES:
        inp = make_inputs(rec, 2, 197, 128, 16, 12, seed=7)
        c_out, c_grads = run(ops.scan_bidir, with_meta(leaves_of(inp, "cpu", torch.float32, torch.float32), inp))
        g_out, g_grads = run(ops.scan_bidir, with_meta(leaves_of(inp, DEV, torch.bfloat16, torch.float32), inp))
        T.close(f"{rec} out", g_out, c_out, TOL_BF16)
        T.ok(f"{rec} every gradient", max(rel(g, c) for g, c in zip(g_grads, c_grads)) <= TOL_BF16,
             f"worst rel err {max(rel(g, c) for g, c in zip(g_grads, c_grads)):.3e}")


def test_streams_and_devices(T):
    inp = make_inputs("longhorn", 4, 197, 384, 16, 12, seed=11)
    base = with_meta(leaves_of(inp, DEV, torch.bfloat16, torch.float32), inp)
    want, want_g = run(ops.scan_bidir, base)
    # a side stream whose inputs arrive behind a slow kernel: vil's work must wait for them
    L = with_meta(leaves_of(inp, DEV, torch.bfloat16, torch.float32), inp)
    u0 = L["u"][0]
    real = u0.detach().clone()
    with torch.no_grad():
        u0.zero_()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    dev_before = torch.cuda.current_device()
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of spinning on s
        with torch.no_grad():
            u0.copy_(real)
        out = ops.scan_bidir(L["u"], L["d"], L["x"], L["z"], L["D"], L["A"], recurrence="longhorn", dt_ld=12, N=16)
        copy = out.detach().clone()  # queued on s right behind vil's work: must see its output
        out.backward(L["dout"].to(DEV, out.dtype))
    s.synchronize()
    T.ok("a side stream: the inputs written behind a slow kernel are the ones read", torch.equal(out.detach(), want))
    T.ok("a side stream: work queued after the op sees its output", torch.equal(copy, want))
    T.ok("a side stream: the gradients", all(torch.equal(a, b) for a, b in zip([t.grad for t in L["leaves"]], want_g)))
    T.equal("the current device is torch's", torch.cuda.current_device(), dev_before)
    if torch.cuda.device_count() < 2:
        T.skip("another GPU", "one GPU here")
        return
    with torch.cuda.device(0):
        L1 = with_meta(leaves_of(inp, "cuda:1", torch.bfloat16, torch.float32), inp)
        out1, g1 = run(ops.scan_bidir, L1)
        T.equal("tensors on cuda:1 while cuda:0 is current: the current device stays", torch.cuda.current_device(), 0)
    T.ok("cuda:1 gives cuda:0's bits", torch.equal(out1.cpu(), want.cpu()) and
         all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(g1, want_g)))


def _graph_step(L):
    for t in L["leaves"]:
        t.grad = None
    # z = xz[..., E:] made inside the step, as a model's forward makes it: a view of a leaf made
    # before the capture keeps the leaf's AccumulateGrad node from the default stream, and the
    # capture of the backward then fails with torch's own ops alone ("operation would make the
    # legacy stream depend on a capturing blocking stream")
    z = L["leaves"][6][..., L["u"][0].shape[-1]:]
    out = ops.scan_bidir(L["u"], L["d"], L["x"], z, L["D"], L["A"], recurrence=L["rec"], dt_ld=L["dt_ld"],
                         N=L["N"])
    out.backward(L["gout"] * 1)  # the gradient made on the step's stream (the capture's, in capture)
    return out


def test_cuda_graph(T):
    """the forward and backward captured in a CUDA graph (after an eager warm-up on a side stream,
    as torch.cuda.graphs asks), replayed: the eager results, on new inputs too, and after a larger
    shape ran eagerly (vil's scratch of the graph's context is never moved)"""
    for rec in ops.RECURRENCES:
        inp = make_inputs(rec, 2, 197, 384, 16, 12, seed=21)
        L = with_meta(leaves_of(inp, DEV, torch.bfloat16, torch.float32), inp)
        L["gout"] = inp["raw"]["dout"].to(DEV, torch.bfloat16)
        # leaves_of's view z keeps xz's AccumulateGrad node, made on the default stream, alive:
        # torch then syncs the legacy stream in the capture's backward and the capture fails
        # (torch's own rule, its warning says so); _graph_step makes z inside the step
        del L["z"]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                _graph_step(L)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        for t in L["leaves"]:
            t.grad = None
        with torch.cuda.graph(g):
            static_out = _graph_step(L)
        static_grads = [t.grad for t in L["leaves"]]
        ref_out, ref_grads = run(ops.scan_bidir, with_meta(leaves_of(inp, DEV, torch.bfloat16, torch.float32), inp))
        g.replay()
        torch.cuda.synchronize()
        T.ok(f"{rec} replay = eager", torch.equal(static_out, ref_out) and
             all(torch.equal(a, b) for a, b in zip(static_grads, ref_grads)))
        # new values in the static inputs
        inp2 = make_inputs(rec, 2, 197, 384, 16, 12, seed=22)
        L2 = with_meta(leaves_of(inp2, DEV, torch.bfloat16, torch.float32), inp2)
        with torch.no_grad():
            for a, b in zip(L["leaves"], L2["leaves"]):
                a.copy_(b)
            L["gout"].copy_(inp2["raw"]["dout"].to(DEV, torch.bfloat16))
        ref2, ref2_g = run(ops.scan_bidir, L2)
        g.replay()
        torch.cuda.synchronize()
        T.ok(f"{rec} replay on new inputs = eager", torch.equal(static_out, ref2) and
             all(torch.equal(a, b) for a, b in zip(static_grads, ref2_g)))
        # a larger shape eagerly (it would grow the scratch the graph uses: it gets another context)
        big = make_inputs(rec, 8, 730, 384, 16, 12, seed=23)
        run(ops.scan_bidir, with_meta(leaves_of(big, DEV, torch.bfloat16, torch.float32), big))
        g.replay()
        torch.cuda.synchronize()
        T.ok(f"{rec} replay after a larger eager shape = eager", torch.equal(static_out, ref2) and
             all(torch.equal(a, b) for a, b in zip(static_grads, ref2_g)))


def test_capture_of_a_new_shape_is_refused(T):
    """in a process of its own: a capture whose scan shape never ran eagerly raises, saying why"""
    code = textwrap.dedent("""
        import torch, vil
        B, L, E, N = 2, 50, 64, 16
        t = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16)
        u, d, x, z = [t(B, L, E), t(B, L, E)], [t(B, L, E), t(B, L, E)], [t(B, L, 2 * N), t(B, L, 2 * N)], t(B, L, E)
        D = [torch.ones(E, device="cuda"), torch.ones(E, device="cuda")]
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                vil.ops.scan_bidir(u, d, x, z, D, None, recurrence="longhorn", dt_ld=0, N=N)
            print("captured")
        except RuntimeError as e:
            print("refused:", e)
        """)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    T.ok("refused with the reason", "refused:" in p.stdout and "CUDA graph capture" in p.stdout,
         (p.stdout + p.stderr)[-400:])


def test_autocast_training_step(T):
    """a bf16-autocast training step of the module on the GPU (vil's CUDA scan) against the same
    step on the plain PyTorch scan; a few steps lower the loss"""
    torch.manual_seed(0)
    for arch in ("vil", "vim"):
        m = vil.Classifier(arch=arch, img_size=64, patch_size=8, stride=8, embed_dim=64, depth=2, d_state=16,
                           num_classes=10).to(DEV)
        x = torch.randn(8, 3, 64, 64, device=DEV)
        y = torch.arange(8, device=DEV) % 10
        grads = {}
        for use in (True, False):
            m.use_vil_ops = use
            m.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            grads[use] = torch.cat([p.grad.flatten().float() for p in m.parameters()])
            T.ok(f"{arch} {'vil ops' if use else 'reference'}: loss finite", torch.isfinite(loss).item(),
                 f"{loss.item():.4f}")
        T.close(f"{arch} every gradient, vil ops against the reference scan", grads[True], grads[False], 5e-2)
        m.use_vil_ops = True
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses = []
        for _ in range(8):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        T.ok(f"{arch} 8 AdamW steps on one batch lower the loss", losses[-1] < losses[0],
             f"{losses[0]:.4f} -> {losses[-1]:.4f}")
        # the module on the GPU in float32 (the scan in bf16 inside) against the CPU's
        m.eval()
        with torch.no_grad():
            gpu = m(x).float().cpu()
            cpu = m.cpu()(x.cpu())
        T.close(f"{arch} float32 logits on the GPU against the CPU's", gpu, cpu, 3e-2)


def test_conv_cuda(T):
    """vil.ops.conv1d_silu_bidir on vil's CUDA kernel against the float64 reference: bf16 inputs
    (as the kernel takes them) and float32 ones (converted), ViL-Tiny's shape, x inside xz (rows of
    2E), an odd channel count (one channel a thread), K 4 and 6; then the same bf16-exact inputs
    through vil's CPU conv"""
    from test_ops import conv_double, conv_inputs, conv_run
    cases = {"ViL-Tiny": (2, 197, 384, 4, {}), "x inside xz": (2, 197, 384, 4, {"x_view": True}),
             "odd E, K 6": (3, 50, 37, 6, {}), "float32 inputs": (2, 64, 96, 4, {"dtype": torch.float32})}
    for name, (B, L, E, K, o) in cases.items():
        dt = o.pop("dtype", torch.bfloat16)
        cpu = conv_inputs(B, L, E, K, dtype=torch.bfloat16, seed=B + L, **o)  # bf16-exact values
        for t in cpu["leaves"][1:]:  # the parameters float32, as the model keeps them
            t.data = t.data.float()
        gpu = conv_double(cpu)
        gpu = dict(x=None, leaves=[t.detach().to(DEV, dt if i == 0 else torch.float32).requires_grad_(True)
                                   for i, t in enumerate(gpu["leaves"])], du=[d.to(DEV, dt) for d in gpu["du"]])
        gpu["x"], gpu["w"], gpu["b"] = gpu["leaves"][0][..., :E], gpu["leaves"][1:3], gpu["leaves"][3:5]
        u, grads = conv_run(ops.conv1d_silu_bidir, gpu)
        ru, rgrads = conv_run(ops.conv1d_silu_bidir_reference, conv_double(cpu))
        for j in (0, 1):
            T.close(f"conv {name} u[{j}]", u[j].double().cpu(), ru[j], TOL_BF16)
            T.equal(f"conv {name} u[{j}] dtype", u[j].dtype, dt)
        for lname, gr, rg in zip(("x", "w[0]", "w[1]", "b[0]", "b[1]"), grads, rgrads):
            T.close(f"conv {name} d{lname}", gr.double().cpu(), rg, TOL_BF16)
        if dt == torch.bfloat16:
            c = conv_double(cpu)
            c = dict(leaves=[t.detach().float().requires_grad_(True) for t in c["leaves"]], du=[d.float() for d in c["du"]])
            c["x"], c["w"], c["b"] = c["leaves"][0][..., :E], c["leaves"][1:3], c["leaves"][3:5]
            cu, cg = conv_run(ops.conv1d_silu_bidir, c)
            T.close(f"conv {name}: CUDA against vil's CPU conv, u[0]", u[0].float().cpu(), cu[0], TOL_BF16)
            T.close(f"conv {name}: CUDA against vil's CPU conv, dw[1]", grads[2].cpu(), cg[2], TOL_BF16)


def test_conv_cuda_graph(T):
    """the conv's forward and backward captured in a CUDA graph (torch's default, global capture
    mode; the backward runs on autograd's thread) and replayed: the eager results"""
    from test_ops import conv_inputs
    inp = conv_inputs(4, 197, 384, 4, dtype=torch.bfloat16, seed=3)
    leaves = [t.detach().to(DEV, torch.bfloat16 if i == 0 else torch.float32).requires_grad_(True)
              for i, t in enumerate(inp["leaves"])]
    du = [d.to(DEV) for d in inp["du"]]

    def step():
        for t in leaves:
            t.grad = None
        u = ops.conv1d_silu_bidir(leaves[0], leaves[1:3], leaves[3:5])
        torch.autograd.backward(u, [d * 1 for d in du])
        return u
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_u = step()
    static_g = [t.grad for t in leaves]
    want_u = [t.clone() for t in step()]
    want_g = [t.grad.clone() for t in leaves]
    g.replay()
    torch.cuda.synchronize()
    T.ok("conv: replay = eager", all(torch.equal(a, b) for a, b in zip(static_u, want_u)) and
         all(torch.equal(a, b) for a, b in zip(static_g, want_g)))


def test_rmsnorm_cuda(T):
    """vil.reference.rmsnorm on CUDA (torch's F.rms_norm where torch has it) against the formula
    in float64 on the CPU: values and gradients, float32 and bf16 inputs"""
    g = torch.Generator().manual_seed(9)
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, TOL_BF16)):
        x = torch.randn(4, 33, 192, generator=g).to(dt)
        w = 1 + 0.1 * torch.randn(192, generator=g)
        dy = torch.randn(4, 33, 192, generator=g)
        xd, wd = x.double().requires_grad_(True), w.double().requires_grad_(True)
        ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5) * wd
        ref.backward(dy.double())
        xc, wc = x.to(DEV).requires_grad_(True), w.to(DEV).requires_grad_(True)
        y = vil.reference.rmsnorm(xc, wc)
        y.backward(dy.to(DEV, y.dtype))
        T.close(f"rmsnorm {dt} y", y.double().cpu(), ref.detach(), tol)
        T.close(f"rmsnorm {dt} dx", xc.grad.double().cpu(), xd.grad, tol)
        T.close(f"rmsnorm {dt} dw", wc.grad.double().cpu(), wd.grad, tol)

def graphed_train_step(model, opt, x, y, warmup=3):
    """a whole bf16-autocast training step (forward, backward, optimizer) of the module captured
    in one CUDA graph, torch's recipe: warm-up steps on a side stream, gradients set to None before
    the capture (they are then allocated from the graph's pool), autocast without its weight cache.
    Returns (replay, static_loss); the warm-up steps are real steps."""
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_loss = step()
    return g.replay, static_loss


def test_graphed_training_step(T):
    """the module's whole training step in one CUDA graph (torch's default capture mode): its
    replays give the eager steps' losses and parameters"""
    import copy
    for arch in ("vil", "vim"):
        torch.manual_seed(1)
        m = vil.Classifier(arch=arch, img_size=64, patch_size=8, stride=8, embed_dim=64, depth=2, d_state=16,
                           num_classes=10).to(DEV).train()
        m2 = copy.deepcopy(m)
        x = torch.randn(8, 3, 64, 64, device=DEV)
        y = torch.arange(8, device=DEV) % 10
        mk = lambda mod: torch.optim.AdamW(mod.parameters(), lr=1e-3, capturable=True)  # noqa: E731
        opt, opt2 = mk(m), mk(m2)
        eager = []
        for _ in range(5):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            eager.append(loss.item())
        try:
            replay, static_loss = graphed_train_step(m2, opt2, x, y, warmup=3)
        except Exception as e:  # noqa: BLE001
            T.ok(f"{arch}: the step captures", False, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        graphed = []
        for _ in range(2):
            replay()
            graphed.append(static_loss.item())
        torch.cuda.synchronize()
        T.close(f"{arch}: steps 4 and 5 replayed = eager (loss)", torch.tensor(graphed), torch.tensor(eager[3:]), 1e-3)
        pe = torch.cat([p.detach().flatten() for p in m.parameters()])
        pg = torch.cat([p.detach().flatten() for p in m2.parameters()])
        T.close(f"{arch}: parameters after 5 steps, replayed = eager", pg, pe, 1e-3)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print(f"skip gpu_ops.py: torch {torch.__version__} sees no CUDA GPU")
        print("0 passed, 0 failed")
        sys.exit(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, libvil {vil.library_path()}")
    sys.exit(run_tests(globals(), sys.argv[1:]))
