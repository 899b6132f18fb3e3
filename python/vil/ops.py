"""ops.py: vil's bidirectional Longhorn and Mamba scans as autograd functions over libvil's
vil_scan_forward / vil_scan_backward (include/vil.h), and the plain PyTorch reference of the same
math (vil.reference). CUDA tensors run vil's CUDA kernels on torch's current stream of the
tensors' device; CPU tensors run vil's float32 CPU scan.

What the bridge owns, so that a caller need not:
- dtypes: the CUDA kernels take bf16 activations and float32 D, A_log; the CPU scan float32
  throughout. Other dtypes are converted (never reinterpreted); the output has the activations'
  promoted dtype and each gradient its input's dtype. Under autocast the model's activations
  already are bf16 and go through without a copy.
- layouts: u and delta are made contiguous; xdbl and z are passed as rows of a stride (z may be
  the second half of in_proj's output, xz[..., E:], with no copy); anything else is copied.
- outputs never alias inputs: out, du, ddelta, dxdbl, dz are fresh tensors from torch's
  allocator (the kernels stash intermediate values in out and dz), the accumulating gradients
  (dD, dA_log) start from zeroed buffers.
- devices and streams: each call runs inside torch.cuda.device(the tensors' device) on
  torch.cuda.current_stream(device), on a vil context of that GPU (vil's own stream is joined to
  torch's with events, no synchronisation).
- CUDA graphs: vil's kernels take scratch memory from vil's context (grow-only, cudaMalloc),
  which cannot grow during a capture; a scan of a shape that has not run eagerly before is
  refused during capture (warm up first, as torch.cuda.graphs asks anyway), and a context whose
  scratch a captured graph uses is never grown again: a later new shape gets a context of its
  own."""
import ctypes
import threading

import torch

from . import _clib
from .reference import (OWN_PARAM, SCANS, conv1d_silu_bidir_reference, longhorn_scan, mamba_scan,  # noqa: F401
                        scan_bidir_reference)

__all__ = ["scan_bidir", "scan_bidir_reference", "conv1d_silu_bidir", "conv1d_silu_bidir_reference", "longhorn_scan",
           "mamba_scan", "SCANS", "RECURRENCES"]

RECURRENCES = tuple(_clib.RECURRENCES)


# ---- contexts per device ----
class _CudaContexts:
    """The vil contexts of one GPU. A shape's scratch needs are fixed, and vil's scratch only grows,
    so a context that ran a shape runs it again without allocating. `seen` maps a call's shape
    key to the context that ran it; a context becomes pinned when a CUDA graph captures a call on
    it, and from then on it only runs shapes it has run (its scratch stays where the graph
    recorded it); a new shape then opens a new context."""

    def __init__(self, index):
        self.index = index
        self.current = None
        self.seen = {}
        self.lock = threading.Lock()

    def get(self, key, capturing):
        with self.lock:
            c = self.seen.get(key)
            if capturing:
                if c is None:
                    raise RuntimeError(
                        "vil.ops: a scan of this shape runs for the first time inside a CUDA graph capture; "
                        "vil's kernels take scratch memory from vil's own allocator, which cannot grow "
                        "during a capture. Run the same step eagerly once before capturing (torch.cuda.graphs "
                        "asks for warm-up iterations on a side stream anyway).")
                c.pinned = True
                return c
            if c is not None:
                return c
            if self.current is None or self.current.pinned:
                self.current = _clib.Context("cuda", self.index, 0)
            self.seen[key] = self.current
            return self.current


_cuda = {}
_cuda_lock = threading.Lock()


def _cuda_contexts(index):
    with _cuda_lock:
        d = _cuda.get(index)
        if d is None:
            d = _cuda[index] = _CudaContexts(index)
        return d


def _call(fn, arg, device, key):
    """fn(ctx, &arg, stream): on the CPU context of torch's thread count, or on a context of the
    tensors' GPU with torch's current device set to it and its current stream (the capture
    state read there), under the context's lock"""
    f = getattr(_clib.lib(), fn)
    if device.type == "cpu":
        ctx, stream = _clib.cpu_context(torch.get_num_threads()), None
        with ctx.lock:
            rc = f(ctx.h, ctypes.byref(arg), None)
    elif device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        with torch.cuda.device(index):
            ctx = _cuda_contexts(index).get(key, torch.cuda.is_current_stream_capturing())
            stream = ctypes.c_void_p(torch.cuda.current_stream(index).cuda_stream)
            with ctx.lock:
                rc = f(ctx.h, ctypes.byref(arg), stream)
    else:
        raise ValueError(f"vil.ops: tensors on {device}; vil runs on the CPU and on CUDA GPUs")
    if rc != _clib.VIL_OK:
        _clib.check(rc, fn)  # vil_last_error is this thread's, read right after the call


# ---- layouts ----
def _ptr(t):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


def _fptr(t):
    return ctypes.cast(ctypes.c_void_p(t.data_ptr()), _clib.P_float) if t is not None else None


def _rows(t, dtype):
    """t (B, L, W) in dtype, as rows of a common stride: (tensor, ld) with element (b, l, c) at
    (b * L + l) * ld + c. A view whose rows already are so (xz[..., E:]) goes as it is."""
    if t.dtype != dtype:
        t = t.to(dtype)
    B, L, W = t.shape
    if t.is_contiguous():
        return t, W
    s0, s1, s2 = t.stride()
    if s2 == 1 and B > 1 and L > 1 and s1 >= W and s0 == L * s1:
        return t, s1
    t = t.contiguous()
    return t, W


def _dense(t, dtype):
    if t.dtype != dtype:
        t = t.to(dtype)
    return t.contiguous()


def _promoted(ts):
    dt = ts[0].dtype
    for t in ts[1:]:
        dt = torch.promote_types(dt, t.dtype)
    return dt


class _ScanBidir(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rec, dt_ld, N, u0, u1, d0, d1, x0, x1, z, D0, D1, A0, A1):
        dev = u0.device
        act = torch.bfloat16 if dev.type == "cuda" else torch.float32
        acts = (u0, u1, d0, d1, x0, x1, z)
        params = (D0, D1) + ((A0, A1) if OWN_PARAM[rec] else ())
        for t in acts + params:
            if t.device != dev:
                raise ValueError(f"vil.ops.scan_bidir: tensors on {t.device} and {dev}")
        if u0.dim() != 3:
            raise ValueError(f"vil.ops.scan_bidir: u is {tuple(u0.shape)}; (B, L, E) expected")
        B, L, E = u0.shape
        for name, t in (("u[1]", u1), ("delta[0]", d0), ("delta[1]", d1), ("z", z)):
            if tuple(t.shape) != (B, L, E):
                raise ValueError(f"vil.ops.scan_bidir: {name} is {tuple(t.shape)}; u[0] is {(B, L, E)}")
        for j, x in enumerate((x0, x1)):
            if x.dim() != 3 or tuple(x.shape[:2]) != (B, L) or x.shape[2] < dt_ld + 2 * N:
                raise ValueError(f"vil.ops.scan_bidir: xdbl[{j}] is {tuple(x.shape)}; ({B}, {L}, >= dt_ld + 2 N = "
                                 f"{dt_ld + 2 * N}) expected")
        for j, (Dj, Aj) in enumerate(((D0, A0), (D1, A1))):
            if tuple(Dj.shape) != (E,):
                raise ValueError(f"vil.ops.scan_bidir: D[{j}] is {tuple(Dj.shape)}; ({E},) expected")
            if OWN_PARAM[rec] and tuple(Aj.shape) != (E, N):
                raise ValueError(f"vil.ops.scan_bidir: A_log[{j}] is {tuple(Aj.shape)}; ({E}, {N}) expected")
        out_dtype = _promoted(acts)
        if not out_dtype.is_floating_point:
            raise ValueError(f"vil.ops.scan_bidir: {out_dtype} activations; floating point expected")

        u0c, u1c, d0c, d1c = (_dense(t, act) for t in (u0, u1, d0, d1))
        (x0c, ld0), (x1c, ld1) = _rows(x0, act), _rows(x1, act)
        if ld0 != ld1:  # one xdbl_ld for both directions
            x0c, x1c = x0c.contiguous(), x1c.contiguous()
            ld0, ld1 = x0c.shape[2], x1c.shape[2]
            if ld0 != ld1:
                raise ValueError(f"vil.ops.scan_bidir: xdbl[0] has {ld0} columns, xdbl[1] {ld1}: give them one width")
        zc, ldz = _rows(z, act)
        D0c, D1c = _dense(D0, torch.float32), _dense(D1, torch.float32)
        A0c, A1c = (_dense(A0, torch.float32), _dense(A1, torch.float32)) if OWN_PARAM[rec] else (None, None)
        out = torch.empty((B, L, E), dtype=act, device=dev)

        a = _clib.ScanFwd(rec=_clib.RECURRENCES[rec], B=B, L=L, E=E, N=N, dt_ld=dt_ld, xdbl_ld=ld0, ldz=ldz)
        a.u[0], a.u[1], a.delta[0], a.delta[1] = _ptr(u0c), _ptr(u1c), _ptr(d0c), _ptr(d1c)
        a.xdbl[0], a.xdbl[1], a.z = _ptr(x0c), _ptr(x1c), _ptr(zc)
        a.D[0], a.D[1] = _fptr(D0c), _fptr(D1c)
        if A0c is not None:
            a.A_log[0], a.A_log[1] = _fptr(A0c), _fptr(A1c)
        a.out = _ptr(out)
        _call("vil_scan_forward", a, dev, ("fwd", rec, B, L, E, N, dt_ld, ld0, ldz))

        ctx.save_for_backward(u0c, u1c, d0c, d1c, x0c, x1c, zc, D0c, D1c, A0c, A1c)
        dtypes = [None if t is None else t.dtype for t in (u0, u1, d0, d1, x0, x1, z, D0, D1, A0, A1)]
        ctx.meta = (rec, dt_ld, N, ld0, ldz, dtypes, x0.shape[2], x1.shape[2])
        return out if out_dtype == act else out.to(out_dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        rec, dt_ld, N, ld, ldz, dtypes, w0, w1 = ctx.meta
        u0, u1, d0, d1, x0, x1, z, D0, D1, A0, A1 = ctx.saved_tensors
        dev = u0.device
        act = u0.dtype
        B, L, E = u0.shape
        g = _dense(dout, act)
        new = lambda *s: torch.empty(s, dtype=act, device=dev)  # noqa: E731
        du0, du1, dd0, dd1 = new(B, L, E), new(B, L, E), new(B, L, E), new(B, L, E)
        # the backward writes only the k and q columns of dxdbl (the others are the zeros here)
        # and accumulates into dD and dA_log: two zeroed buffers (one fill each) hold them all
        dx0, dx1 = torch.zeros((2, B, L, ld), dtype=act, device=dev).unbind(0)
        dz = new(B, L, ldz)  # rows as z's; its first E columns written
        own = OWN_PARAM[rec]
        acc = torch.zeros((2 + 2 * N * own) * E, dtype=torch.float32, device=dev)
        dD0, dD1 = acc[:E], acc[E:2 * E]
        dA0, dA1 = (acc[2 * E:].view(2, E, N).unbind(0)) if own else (None, None)

        a = _clib.ScanBwd(rec=_clib.RECURRENCES[rec], B=B, L=L, E=E, N=N, dt_ld=dt_ld, xdbl_ld=ld, ldz=ldz)
        a.u[0], a.u[1], a.delta[0], a.delta[1] = _ptr(u0), _ptr(u1), _ptr(d0), _ptr(d1)
        a.xdbl[0], a.xdbl[1], a.z = _ptr(x0), _ptr(x1), _ptr(z)
        a.D[0], a.D[1] = _fptr(D0), _fptr(D1)
        if own:
            a.A_log[0], a.A_log[1] = _fptr(A0), _fptr(A1)
            a.dA_log[0], a.dA_log[1] = _fptr(dA0), _fptr(dA1)
        a.dout = _ptr(g)
        a.du[0], a.du[1], a.ddelta[0], a.ddelta[1] = _ptr(du0), _ptr(du1), _ptr(dd0), _ptr(dd1)
        a.dxdbl[0], a.dxdbl[1], a.dz = _ptr(dx0), _ptr(dx1), _ptr(dz)
        a.dD[0], a.dD[1] = _fptr(dD0), _fptr(dD1)
        _call("vil_scan_backward", a, dev, ("bwd", rec, B, L, E, N, dt_ld, ld, ldz))

        grads = [du0, du1, dd0, dd1, dx0[..., :w0], dx1[..., :w1], dz[..., :E], dD0, dD1, dA0, dA1]
        out = []
        for gr, dt, need in zip(grads, dtypes, ctx.needs_input_grad[3:]):
            if gr is None or not need:
                out.append(None)
            else:
                out.append(gr if gr.dtype == dt else gr.to(dt))
        return (None, None, None, *out)


def scan_bidir(u, delta, xdbl, z, D, A_log=None, *, recurrence, dt_ld, N):
    """vil's bidirectional scan (include/vil.h vil_scan_forward / vil_scan_backward) as an
    autograd function: out = 0.5 * SiLU(z) * (y_0 + y_1), y_j the recurrence over direction j's
    tokens (direction 1 runs over them reversed; its tensors are indexed in token order).

    u, delta, xdbl, D, A_log: pairs (direction 0, direction 1).
      u[j], delta[j]: (B, L, E); delta is dt_proj's output, bias included (the scan applies
        Longhorn's sigmoid or Mamba's softplus itself)
      xdbl[j]: (B, L, W), x_proj's output: k (Mamba's B) at columns [dt_ld, dt_ld + N), q (C) at
        [dt_ld + N, dt_ld + 2N); other columns are not read and get a zero gradient
      z: (B, L, E), the gate (a view with rows of a stride, such as xz[..., E:], is read in place)
      D[j]: (E); A_log[j]: (E, N) for "mamba", None (or A_log None) for "longhorn"
    recurrence: "longhorn" or "mamba"; dt_ld: the column where k starts; N: the state size
    (4, 8 or 16 on CUDA; 1..64 on the CPU).
    Returns out (B, L, E) in the activations' promoted dtype. Gradients flow to every input."""
    if recurrence not in _clib.RECURRENCES:
        raise ValueError(f"vil.ops.scan_bidir: recurrence {recurrence!r}; one of {RECURRENCES}")
    A = (None, None) if A_log is None else tuple(A_log)
    if OWN_PARAM[recurrence] and (A[0] is None or A[1] is None):
        raise ValueError(f"vil.ops.scan_bidir: the {recurrence} recurrence needs A_log for both directions")
    if not OWN_PARAM[recurrence]:
        A = (None, None)
    return _apply(recurrence, int(dt_ld), int(N), u[0], u[1], delta[0], delta[1], xdbl[0], xdbl[1], z,
                  D[0], D[1], A[0], A[1])


class _ConvBidir(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w0, w1, b0, b1):
        dev = x.device
        act = torch.bfloat16 if dev.type == "cuda" else torch.float32
        if x.dim() != 3:
            raise ValueError(f"vil.ops.conv1d_silu_bidir: x is {tuple(x.shape)}; (B, L, E) expected")
        B, L, E = x.shape
        for t in (w0, w1, b0, b1):
            if t.device != dev:
                raise ValueError(f"vil.ops.conv1d_silu_bidir: tensors on {t.device} and {dev}")
        K = w0.shape[-1]
        for j, (wj, bj) in enumerate(((w0, b0), (w1, b1))):
            if wj.numel() != E * K or wj.shape[0] != E or wj.shape[-1] != K or tuple(bj.shape) != (E,):
                raise ValueError(f"vil.ops.conv1d_silu_bidir: w[{j}] {tuple(wj.shape)}, b[{j}] {tuple(bj.shape)}; "
                                 f"(E, K) or (E, 1, K) and (E,) with E = {E} expected")
        if not x.dtype.is_floating_point:
            raise ValueError(f"vil.ops.conv1d_silu_bidir: {x.dtype} x; floating point expected")
        xc, ldx = _rows(x, act)
        wc = [_dense(t, torch.float32).view(E, K) for t in (w0, w1)]
        bc = [_dense(t, torch.float32) for t in (b0, b1)]
        u0, u1 = torch.empty((2, B, L, E), dtype=act, device=dev).unbind(0)
        a = _clib.ConvFwd(B=B, L=L, E=E, K=K, ldx=ldx)
        a.x, a.u[0], a.u[1] = _ptr(xc), _ptr(u0), _ptr(u1)
        a.w[0], a.w[1], a.b[0], a.b[1] = _fptr(wc[0]), _fptr(wc[1]), _fptr(bc[0]), _fptr(bc[1])
        _call("vil_conv_forward", a, dev, ("conv_fwd", B, L, E, K, ldx))
        ctx.save_for_backward(xc, *wc, *bc)
        ctx.meta = (ldx, x.dtype, x.shape, [t.dtype for t in (w0, w1, b0, b1)], [t.shape for t in (w0, w1)])
        return (u0, u1) if x.dtype == act else (u0.to(x.dtype), u1.to(x.dtype))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, du0, du1):
        ldx, x_dtype, x_shape, pdtypes, wshapes = ctx.meta
        xc, w0, w1, b0, b1 = ctx.saved_tensors
        dev, act = xc.device, xc.dtype
        B, L, E = x_shape
        K = w0.shape[1]
        g0, g1 = _dense(du0, act), _dense(du1, act)  # autograd gives zeros for an output left unused
        dx = torch.empty((B, L, ldx), dtype=act, device=dev)  # its first E columns written
        acc = torch.zeros(2 * E * (K + 1), dtype=torch.float32, device=dev)  # dw of both, then db of both
        dw0, dw1 = acc[:2 * E * K].view(2, E, K).unbind(0)
        db0, db1 = acc[2 * E * K:].view(2, E).unbind(0)
        a = _clib.ConvBwd(B=B, L=L, E=E, K=K, ldx=ldx)
        a.x, a.du[0], a.du[1], a.dx = _ptr(xc), _ptr(g0), _ptr(g1), _ptr(dx)
        a.w[0], a.w[1], a.b[0], a.b[1] = _fptr(w0), _fptr(w1), _fptr(b0), _fptr(b1)
        a.dw[0], a.dw[1], a.db[0], a.db[1] = _fptr(dw0), _fptr(dw1), _fptr(db0), _fptr(db1)
        _call("vil_conv_backward", a, dev, ("conv_bwd", B, L, E, K, ldx))
        dx = dx[..., :E]
        out = [dx if dx.dtype == x_dtype else dx.to(x_dtype)]
        for g, dt, shp in ((dw0, pdtypes[0], wshapes[0]), (dw1, pdtypes[1], wshapes[1]), (db0, pdtypes[2], None),
                           (db1, pdtypes[3], None)):
            g = g.view(shp) if shp is not None else g
            out.append(g if g.dtype == dt else g.to(dt))
        return tuple(o if need else None for o, need in zip(out, ctx.needs_input_grad))


def conv1d_silu_bidir(x, w, b):
    """vil's causal depthwise conv1d + SiLU of both directions (include/vil.h vil_conv_forward) as
    an autograd function, on vil's CUDA kernel for CUDA tensors and vil's CPU loop for CPU ones:
    u[0] = SiLU(causal conv of x with w[0] + b[0]); u[1] the same with w[1], b[1] over the
    reversed tokens (vil.ops.conv1d_silu_bidir_reference says it in PyTorch).
      x: (B, L, E) (a view with rows of a stride, such as xz[..., :E], is read in place)
      w[j]: (E, K) or a Conv1d's (E, 1, K) weight; b[j]: (E)  (K 1..6 on CUDA)
    Returns (u_0, u_1), each a contiguous (B, L, E) tensor in x's dtype (computed in bf16 on
    CUDA, float32 on the CPU, as the scans). Gradients flow to x, w and b."""
    return _apply_conv(x, w[0], w[1], b[0], b[1])


# torch.compile's tracer cannot follow the ctypes call: the scan is a graph break for it (torch 2.x;
# torch 1.13 has no compiler)
_apply, _apply_conv = _ScanBidir.apply, _ConvBidir.apply
if hasattr(torch, "compiler") and hasattr(torch.compiler, "disable"):
    _apply, _apply_conv = torch.compiler.disable(_ScanBidir.apply), torch.compiler.disable(_ConvBidir.apply)
