"""test_ops.py: vil.ops.scan_bidir (vil's CPU scan through libvil) against vil.ops'
plain PyTorch reference in float64: the output and the gradient of every input, over a table of
named cases (shapes, layouts, dtypes), every recurrence having one; the reference itself against
torch.autograd.gradcheck in float64; what the bridge owns (dtypes, layouts, inputs left as they
were, outputs that alias nothing, argument errors). Run: /usr/bin/python3 python/tests/test_ops.py [NAME]"""
import sys

from common import run_tests, torch, vil

ops = vil.ops
TOL = 1e-5  # vil's float32 CPU scan against the float64 reference


def make_inputs(rec, B, L, E, N, dt_ld, width=None, z_view=True, x_view=False, dtype=torch.float32, seed=0):
    """random scan inputs: u, delta, xdbl (k | q at dt_ld, row width W), z (a view of a (B, L, 2E)
    xz when z_view), D, A_log (Mamba's S4D-real init, perturbed); the leaves autograd fills"""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s, scale=1.0: (torch.randn(*s, generator=g) * scale).to(dtype).requires_grad_(True)  # noqa: E731
    W = width or dt_ld + 2 * N
    u = [rnd(B, L, E) for _ in range(2)]
    d = [rnd(B, L, E) for _ in range(2)]
    if x_view:  # rows of a wider buffer: the op reads them in place or copies, and answers in their shape
        xbuf = [rnd(B, L, W + 5, scale=0.5) for _ in range(2)]
        x = [b[..., :W] for b in xbuf]
        leaves_x = xbuf
    else:
        x = [rnd(B, L, W, scale=0.5) for _ in range(2)]
        leaves_x = x
    xz = rnd(B, L, 2 * E)
    z = xz[..., E:] if z_view else rnd(B, L, E)
    D = [rnd(E) for _ in range(2)]
    own = vil.reference.OWN_PARAM[rec]
    A = [(torch.log(torch.arange(1, N + 1, dtype=torch.float64)).expand(E, N) +
          0.1 * torch.randn(E, N, generator=g, dtype=torch.float64)).to(dtype).requires_grad_(True)
         for _ in range(2)] if own else None
    leaves = u + d + leaves_x + ([xz] if z_view else [z]) + D + (A or [])
    dout = rnd(B, L, E).detach()
    return dict(u=u, d=d, x=x, z=z, D=D, A=A, leaves=leaves, dout=dout, N=N, dt_ld=dt_ld)


def run(fn, inp, rec, dtype=None):
    """fn's output and the leaves' gradients against dout (the leaves as they are, or as dtype)"""
    leaves = inp["leaves"]
    for t in leaves:
        t.grad = None
    out = fn(inp["u"], inp["d"], inp["x"], inp["z"], inp["D"], inp["A"], recurrence=rec, dt_ld=inp["dt_ld"],
             N=inp["N"])
    out.backward(inp["dout"].to(out.dtype))
    return out.detach(), [t.grad for t in leaves]


def as_double(inp):
    """the same inputs in float64 (new leaves), for the reference"""
    leaves = [t.detach().double().requires_grad_(t.requires_grad) for t in inp["leaves"]]
    it = iter(leaves)
    u, d = [next(it), next(it)], [next(it), next(it)]
    xl = [next(it), next(it)]
    x = [b[..., :inp["x"][0].shape[-1]] for b in xl]
    zl = next(it)
    E = inp["u"][0].shape[-1]
    z = zl[..., E:] if zl.shape[-1] == 2 * E else zl
    D = [next(it), next(it)]
    A = [next(it), next(it)] if inp["A"] is not None else None
    return dict(inp, u=u, d=d, x=x, z=z, D=D, A=A, leaves=leaves, dout=inp["dout"].double())


LEAF_NAMES = ["u0", "u1", "delta0", "delta1", "xdbl0", "xdbl1", "z", "D0", "D1", "A_log0", "A_log1"]

# name: (recurrence, B, L, E, N, dt_ld, options)
CASES = {
    "longhorn_model_layout": ("longhorn", 2, 9, 70, 16, 3, {}),  # x_proj's dense rows, z inside xz
    "mamba_model_layout": ("mamba", 2, 9, 70, 16, 3, {}),
    "longhorn_packed_kq": ("longhorn", 2, 7, 33, 8, 0, {"z_view": False}),  # dt_ld 0: k | q alone
    "mamba_packed_kq": ("mamba", 2, 7, 33, 8, 0, {"z_view": False}),
    "longhorn_one_token": ("longhorn", 1, 1, 5, 4, 2, {}),
    "mamba_one_token": ("mamba", 1, 1, 5, 4, 2, {}),
    "longhorn_padded_rows": ("longhorn", 3, 12, 64, 16, 8, {"width": 48}),  # vil's own padded x_dbl
    "mamba_row_views": ("mamba", 2, 10, 24, 4, 1, {"x_view": True}),  # xdbl: views into wider rows
    "longhorn_long": ("longhorn", 1, 70, 66, 16, 4, {}),  # past the CPU scan's 64-channel block
    "mamba_float64": ("mamba", 2, 6, 12, 4, 2, {"dtype": torch.float64}),  # converted, answered in float64
    "longhorn_bfloat16": ("longhorn", 2, 6, 12, 4, 2, {"dtype": torch.bfloat16}),
}


def test_every_recurrence_has_a_case(T):
    have = {c[0] for c in CASES.values()}
    for rec in ops.RECURRENCES:
        T.ok(f"{rec} in the case table", rec in have)
    T.equal("the package's recurrences are the reference's", set(ops.RECURRENCES), set(vil.reference.SCANS))


def test_against_reference(T):
    for name, (rec, B, L, E, N, dt_ld, o) in CASES.items():
        inp = make_inputs(rec, B, L, E, N, dt_ld, **o)
        dt = o.get("dtype", torch.float32)
        before = [t.detach().clone() for t in inp["leaves"]]
        out, grads = run(ops.scan_bidir, inp, rec)
        ref_out, ref_grads = run(ops.scan_bidir_reference, as_double(inp), rec)
        # bf16 inputs: the op computes in float32 and rounds its answers to bf16 (2^-9)
        tol = 1e-2 if dt == torch.bfloat16 else TOL
        T.close(f"{name} out", out, ref_out, tol)
        T.equal(f"{name} out dtype", out.dtype, dt)
        for lname, g, rg in zip(LEAF_NAMES if inp["A"] else LEAF_NAMES[:9], grads, ref_grads):
            T.close(f"{name} d{lname}", g, rg, tol)
            T.equal(f"{name} d{lname} dtype", g.dtype, dt)
        T.ok(f"{name} inputs unchanged", all(torch.equal(a, b.detach()) for a, b in zip(before, inp["leaves"])))
        if dt_ld > 0:  # columns before k get no gradient from the scan
            T.ok(f"{name} dxdbl dt columns zero", all(float(g[..., :dt_ld].abs().max()) == 0 for g in grads[4:6]))


def test_gradcheck_reference(T):
    """the reference's autograd gradients against finite differences (torch.autograd.gradcheck,
    float64), both recurrences, through the bidirectional op"""
    for rec in ops.RECURRENCES:
        inp = as_double(make_inputs(rec, 2, 5, 3, 2, 1, z_view=False, seed=3))
        leaves = inp["leaves"]

        def f(*xs, rec=rec, inp=inp):
            it = iter(xs)
            u, d, x = [next(it), next(it)], [next(it), next(it)], [next(it), next(it)]
            z, D = next(it), [next(it), next(it)]
            A = [next(it), next(it)] if inp["A"] is not None else None
            return ops.scan_bidir_reference(u, d, x, z, D, A, recurrence=rec, dt_ld=1, N=2)
        T.ok(f"{rec} gradcheck", torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-7, rtol=1e-5))


def test_vil_op_finite_differences(T):
    """vil's op (float32 inside) against central differences of itself in float64 inputs: the
    gradients are the op's own derivative, not only equal to the reference's"""
    for rec in ops.RECURRENCES:
        inp = make_inputs(rec, 1, 4, 3, 2, 1, z_view=False, dtype=torch.float64, seed=5)
        leaves = inp["leaves"]

        def f(*xs, rec=rec, inp=inp):
            it = iter(xs)
            u, d, x = [next(it), next(it)], [next(it), next(it)], [next(it), next(it)]
            z, D = next(it), [next(it), next(it)]
            A = [next(it), next(it)] if inp["A"] is not None else None
            return ops.scan_bidir(u, d, x, z, D, A, recurrence=rec, dt_ld=1, N=2)
        T.ok(f"{rec} gradcheck at float32's precision",
             torch.autograd.gradcheck(f, leaves, eps=1e-2, atol=5e-3, rtol=5e-3))


def test_outputs_alias_nothing(T):
    inp = make_inputs("mamba", 2, 5, 8, 4, 1)
    out = ops.scan_bidir(inp["u"], inp["d"], inp["x"], inp["z"], inp["D"], inp["A"], recurrence="mamba", dt_ld=1, N=4)
    ptrs = {t.data_ptr() for t in inp["leaves"]}
    T.ok("out is a fresh tensor", out.data_ptr() not in ptrs)
    out.backward(inp["dout"])
    gptrs = [t.grad.data_ptr() for t in inp["leaves"]]
    T.ok("gradients are fresh tensors", not ptrs & set(gptrs) and len(set(gptrs)) == len(gptrs))
    # a second backward through a retained graph gives the same gradients (nothing accumulated twice)
    inp2 = make_inputs("mamba", 2, 5, 8, 4, 1)
    out2 = ops.scan_bidir(inp2["u"], inp2["d"], inp2["x"], inp2["z"], inp2["D"], inp2["A"], recurrence="mamba",
                          dt_ld=1, N=4)
    out2.backward(inp2["dout"], retain_graph=True)
    g1 = [t.grad.clone() for t in inp2["leaves"]]
    for t in inp2["leaves"]:
        t.grad = None
    out2.backward(inp2["dout"])
    T.ok("a retained graph's second backward gives the same gradients",
         all(torch.equal(a, t.grad) for a, t in zip(g1, inp2["leaves"])))


def test_in_place_change_is_caught(T):
    """an input changed in place after the forward: autograd refuses the backward (the op saved
    it, not a copy it made)"""
    inp = make_inputs("longhorn", 1, 4, 8, 4, 0, z_view=False)
    u0 = inp["u"][0].detach().clone().requires_grad_(True)
    w = u0 * 1.0
    out = ops.scan_bidir([w, inp["u"][1]], inp["d"], inp["x"], inp["z"], inp["D"], None, recurrence="longhorn",
                         dt_ld=0, N=4)
    with torch.no_grad():
        w.add_(1.0)
    T.raises("backward after an in-place change", RuntimeError, lambda: out.sum().backward(), "modified by an inplace")


def test_partial_gradients(T):
    """only some inputs need gradients: those get them, the others stay None"""
    inp = make_inputs("mamba", 2, 5, 8, 4, 1)
    for t in inp["leaves"]:
        t.requires_grad_(False)
    inp["u"][0].requires_grad_(True)
    inp["A"][1].requires_grad_(True)
    out = ops.scan_bidir(inp["u"], inp["d"], inp["x"], inp["z"], inp["D"], inp["A"], recurrence="mamba", dt_ld=1, N=4)
    out.backward(inp["dout"])
    T.ok("u[0] and A_log[1] have gradients", inp["u"][0].grad is not None and inp["A"][1].grad is not None)
    T.ok("the others none", all(t.grad is None for t in inp["leaves"] if t is not inp["u"][0] and t is not inp["A"][1]))
    ref = as_double(inp)
    for t in ref["leaves"]:
        t.requires_grad_(False)
    ref["u"][0].requires_grad_(True)
    ref["A"][1].requires_grad_(True)
    o = ops.scan_bidir_reference(ref["u"], ref["d"], ref["x"], ref["z"], ref["D"], ref["A"], recurrence="mamba",
                                 dt_ld=1, N=4)
    o.backward(ref["dout"])
    T.close("du[0]", inp["u"][0].grad, ref["u"][0].grad, TOL)
    T.close("dA_log[1]", inp["A"][1].grad, ref["A"][1].grad, TOL)


def test_threads(T):
    """the CPU scan's results do not depend on torch's thread count (vil's contexts follow it)"""
    inp = make_inputs("longhorn", 4, 20, 130, 16, 3)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a, ga = run(ops.scan_bidir, inp, "longhorn")
        torch.set_num_threads(max(2, n))
        b, gb = run(ops.scan_bidir, inp, "longhorn")
    finally:
        torch.set_num_threads(n)
    T.ok("1 thread and several: the same bits", torch.equal(a, b) and all(torch.equal(x, y) for x, y in zip(ga, gb)))


def test_autocast_cpu(T):
    """under CPU autocast (bf16) the activations arrive as bf16: converted for the float32 scan,
    answered in bf16, gradients in each input's dtype"""
    inp = make_inputs("mamba", 2, 6, 16, 4, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        u = [t.to(torch.bfloat16) for t in inp["u"]]
        out = ops.scan_bidir(u, inp["d"], inp["x"], inp["z"], inp["D"], inp["A"], recurrence="mamba", dt_ld=2, N=4)
    T.equal("out dtype (bf16 and float32 inputs promote to float32)", out.dtype, torch.float32)
    out.backward(inp["dout"])
    T.ok("u's gradient reaches the float32 leaf", inp["u"][0].grad is not None and inp["u"][0].grad.dtype == torch.float32)


def test_argument_errors(T):
    inp = make_inputs("mamba", 2, 5, 8, 4, 1)
    f = ops.scan_bidir
    T.raises("Mamba without A_log", ValueError,
             lambda: f(inp["u"], inp["d"], inp["x"], inp["z"], inp["D"], None, recurrence="mamba", dt_ld=1, N=4), "A_log")
    T.raises("an unknown recurrence", ValueError,
             lambda: f(inp["u"], inp["d"], inp["x"], inp["z"], inp["D"], None, recurrence="gru", dt_ld=1, N=4), "gru")
    T.raises("xdbl narrower than dt_ld + 2N", ValueError,
             lambda: f(inp["u"], inp["d"], inp["x"], inp["z"], inp["D"], inp["A"], recurrence="mamba", dt_ld=3, N=4),
             "xdbl[0]")
    T.raises("z of another shape", ValueError,
             lambda: f(inp["u"], inp["d"], inp["x"], inp["z"][:, :3], inp["D"], inp["A"], recurrence="mamba", dt_ld=1,
                       N=4), "z is")
    big = make_inputs("longhorn", 1, 3, 4, 65, 0, z_view=False)
    T.raises("N = 65: vil's own message", vil.VilError,
             lambda: f(big["u"], big["d"], big["x"], big["z"], big["D"], None, recurrence="longhorn", dt_ld=0, N=65),
             "N = 65")


# ---- the conv1d + SiLU of both directions ----
def conv_inputs(B, L, E, K, x_view=False, conv_shape=False, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g).to(dtype).requires_grad_(True)  # noqa: E731
    xl = rnd(B, L, 2 * E) if x_view else rnd(B, L, E)
    w = [rnd(E, 1, K) if conv_shape else rnd(E, K) for _ in range(2)]
    b = [rnd(E) for _ in range(2)]
    du = [torch.randn(B, L, E, generator=g).to(dtype) for _ in range(2)]
    return dict(x=xl[..., :E] if x_view else xl, leaves=[xl, *w, *b], w=w, b=b, du=du)


def conv_run(fn, inp):
    for t in inp["leaves"]:
        t.grad = None
    u = fn(inp["x"], inp["w"], inp["b"])
    torch.autograd.backward(u, [d.to(u[0].dtype) for d in inp["du"]])
    return [t.detach() for t in u], [t.grad for t in inp["leaves"]]


def conv_double(inp):
    leaves = [t.detach().double().requires_grad_(True) for t in inp["leaves"]]
    E = inp["x"].shape[-1]
    return dict(x=leaves[0][..., :E], leaves=leaves, w=leaves[1:3], b=leaves[3:5], du=[d.double() for d in inp["du"]])


def conv_loop(x, w, b):
    """the definition in include/vil.h, a loop over the taps (independent of F.conv1d)"""
    B, L, E = x.shape
    K = w[0].shape[-1]
    out = []
    for j in (0, 1):
        wj = w[j].reshape(E, K)
        pre = b[j].expand(B, L, E).clone()
        for t in range(L):
            for k in range(K):
                s = t - K + 1 + k if j == 0 else t + K - 1 - k
                if 0 <= s < L:
                    pre[:, t] += wj[:, k] * x[:, s]
        out.append(torch.nn.functional.silu(pre))
    return out


CONV_CASES = {  # name: (B, L, E, K, options)
    "ViL-like": (2, 9, 6, 4, {}),
    "x a view of xz (rows of 2E)": (2, 7, 5, 4, {"x_view": True}),
    "L shorter than K": (3, 2, 4, 4, {}),
    "K 1": (1, 5, 3, 1, {}),
    "Conv1d-shaped weights, K 3": (2, 6, 4, 3, {"conv_shape": True}),
    "float64 inputs": (2, 5, 4, 4, {"dtype": torch.float64}),
    "bf16 inputs": (2, 5, 8, 4, {"dtype": torch.bfloat16}),
}


def test_conv_against_reference(T):
    for name, (B, L, E, K, o) in CONV_CASES.items():
        inp = conv_inputs(B, L, E, K, **o)
        dt = o.get("dtype", torch.float32)
        before = [t.detach().clone() for t in inp["leaves"]]
        u, grads = conv_run(ops.conv1d_silu_bidir, inp)
        ru, rgrads = conv_run(ops.conv1d_silu_bidir_reference, conv_double(inp))
        tol = 1e-2 if dt == torch.bfloat16 else TOL
        for j in (0, 1):
            T.close(f"conv {name} u[{j}]", u[j], ru[j], tol)
            T.equal(f"conv {name} u[{j}] dtype", u[j].dtype, dt)
        for lname, gr, rg in zip(("x", "w[0]", "w[1]", "b[0]", "b[1]"), grads, rgrads):
            T.close(f"conv {name} d{lname}", gr, rg, tol)
        if o.get("x_view"):
            T.ok(f"conv {name}: z's half of xz gets no gradient", float(grads[0][..., E:].abs().max()) == 0)
        T.ok(f"conv {name} inputs unchanged", all(torch.equal(a, b.detach()) for a, b in zip(before, inp["leaves"])))


def test_conv_reference_is_the_definition(T):
    """the reference (F.conv1d, the flipped filter for direction 1) against a loop over the taps"""
    for K in (1, 3, 4):
        inp = conv_double(conv_inputs(2, 6, 3, K, seed=K))
        ref = ops.conv1d_silu_bidir_reference(inp["x"], inp["w"], inp["b"])
        loop = conv_loop(inp["x"], inp["w"], inp["b"])
        for j in (0, 1):
            T.close(f"K {K} u[{j}]", ref[j], loop[j], 1e-12)


def test_conv_gradcheck(T):
    inp = conv_double(conv_inputs(2, 5, 3, 3, seed=7))
    f = lambda x, w0, w1, b0, b1: ops.conv1d_silu_bidir_reference(x, (w0, w1), (b0, b1))  # noqa: E731
    T.ok("the reference's gradcheck (float64)", torch.autograd.gradcheck(f, inp["leaves"], eps=1e-6, atol=1e-7))
    g = lambda x, w0, w1, b0, b1: ops.conv1d_silu_bidir(x, (w0, w1), (b0, b1))  # noqa: E731
    T.ok("vil's op against central differences at float32's precision",
         torch.autograd.gradcheck(g, inp["leaves"], eps=1e-2, atol=5e-3, rtol=5e-3))


def test_conv_errors(T):
    inp = conv_inputs(2, 5, 4, 4)
    f = ops.conv1d_silu_bidir
    T.raises("x not (B, L, E)", ValueError, lambda: f(inp["x"][0], inp["w"], inp["b"]), "(B, L, E)")
    T.raises("w of another E", ValueError, lambda: f(inp["x"], [inp["w"][0][:3], inp["w"][1]], inp["b"]), "w[0]")
    T.raises("b of another E", ValueError, lambda: f(inp["x"], inp["w"], [inp["b"][0], inp["b"][1][:2]]), "b[1]")
    T.raises("integer x", ValueError, lambda: f(inp["x"].detach().long(), inp["w"], inp["b"]), "floating point")


if __name__ == "__main__":
    sys.exit(run_tests(globals(), sys.argv[1:]))
