"""reference.py: vil's math in plain PyTorch, differentiable by autograd and float64-capable: the
recurrences of doc/scans.md one direction at a time (SCANS: one function per recurrence of
vil/rec/list.h), the bidirectional op as vil's model runs it (scan_bidir_reference: gate and
average, direction 1 on the reversed tokens), RMSNorm, and the position embedding moved to
another grid (doc/models.md). The model (vil.model) runs these when told not to use vil's ops;
tools/torch_reference.py checks vil's C code against them; tests/python checks vil.ops against
them. Written as the equations read, a Python loop over the tokens: a reference, not a kernel."""
import torch
import torch.nn.functional as F


def rmsnorm(x, w, eps=1e-5):
    """x * w / sqrt(mean(x^2) + eps) over the last dimension, no bias, no mean subtraction;
    computed in float32 at least, answered in the promoted dtype of x and w. On CUDA, where torch
    has F.rms_norm, the same formula through it (torch's fused kernel: one pass each way instead
    of the seven elementwise and reduction kernels written out)."""
    dt = torch.promote_types(x.dtype, w.dtype)
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if x.is_cuda and hasattr(F, "rms_norm"):
        y = F.rms_norm(x, (x.shape[-1],), w if w.dtype == x.dtype else w.to(x.dtype), eps)
    else:
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    return y if y.dtype == dt else y.to(dt)


def longhorn_scan(u, delta, k, q, D):
    """Longhorn (ViL), one direction over tokens 0..L-1: u, delta (B, L, E); k, q (B, L, N);
    D (E) -> y (B, L, E). beta = sigmoid(delta), eps = beta / (1 + beta |k|^2),
    h = (1 - eps k^2) h + eps u k, y = q.h + D u"""
    Bsz, L, E = u.shape
    N = k.shape[-1]
    beta = torch.sigmoid(delta)
    kappa = (k * k).sum(-1, keepdim=True)  # (B, L, 1)
    eps = beta / (1 + beta * kappa)  # (B, L, E)
    h = u.new_zeros(Bsz, E, N)
    ys = []
    for t in range(L):
        a = 1 - eps[:, t, :, None] * (k[:, t, None, :] ** 2)
        h = a * h + (eps[:, t] * u[:, t])[:, :, None] * k[:, t, None, :]
        ys.append((h * q[:, t, None, :]).sum(-1))
    return torch.stack(ys, 1) + D * u


def mamba_scan(u, delta, Bm, Cm, A_log, D):
    """Mamba-1's selective scan (ViM), one direction: dt = softplus(delta), A = -exp(A_log) (E, N),
    h = exp(dt A) h + dt u B, y = C.h + D u"""
    Bsz, L, E = u.shape
    N = Bm.shape[-1]
    dt = F.softplus(delta)
    A = -torch.exp(A_log)  # (E, N)
    h = u.new_zeros(Bsz, E, N)
    ys = []
    for t in range(L):
        a = torch.exp(dt[:, t, :, None] * A)
        h = a * h + (dt[:, t] * u[:, t])[:, :, None] * Bm[:, t, None, :]
        ys.append((h * Cm[:, t, None, :]).sum(-1))
    return torch.stack(ys, 1) + D * u


# One direction of each recurrence, by its id in vil/rec/list.h (tools/scan_dump --list):
# u, delta (B, L, E); k, q (B, L, N); D (E); A_log (E, N) or None -> y (B, L, E)
SCANS = {
    "longhorn": lambda u, delta, k, q, D, A_log: longhorn_scan(u, delta, k, q, D),
    "mamba": lambda u, delta, k, q, D, A_log: mamba_scan(u, delta, k, q, A_log, D),
}
# the recurrences that read a parameter of their own (A_log: `A_log`, `A_b_log` in a checkpoint)
OWN_PARAM = {"longhorn": False, "mamba": True}


def conv1d_silu_bidir_reference(x, w, b):
    """the mixer's causal depthwise conv1d and SiLU of both directions (include/vil.h
    vil_conv_forward): x (B, L, E); w[j] (E, K) (a Conv1d's (E, 1, K) weight also goes); b[j] (E).
    u[0][t] = SiLU(b_0 + sum_k w_0[k] x[t - K + 1 + k]); u[1][t] = SiLU(b_1 + sum_k w_1[k]
    x[t + K - 1 - k]): the same filter over the reversed tokens. Zero outside the tokens; float32
    inside (float64 when given float64); returns (u_0, u_1), each (B, L, E) in x's promoted dtype."""
    dt = torch.promote_types(x.dtype, w[0].dtype)
    work = dt if dt == torch.float64 else torch.float32
    E, L = x.shape[2], x.shape[1]
    xt = x.to(work).transpose(1, 2)  # (B, E, L)
    w0, w1 = (wj.to(work).reshape(E, 1, -1) for wj in w)
    K = w0.shape[-1]
    u0 = F.silu(F.conv1d(xt, w0, b[0].to(work), padding=K - 1, groups=E)[..., :L])
    u1 = F.silu(F.conv1d(xt, w1.flip(-1), b[1].to(work), padding=K - 1, groups=E)[..., K - 1:])
    return tuple(u.transpose(1, 2).to(dt) for u in (u0, u1))


def scan_bidir_reference(u, delta, xdbl, z, D, A_log=None, *, recurrence, dt_ld, N):
    """vil's bidirectional scan (include/vil.h vil_scan_forward, doc/scans.md "Bidirectional"):
    out = 0.5 * SiLU(z) * (y_0 + y_1), y_j the recurrence over direction j's tokens (direction 1
    over them reversed; its tensors indexed in token order). u, delta, xdbl, D, A_log: pairs
    (direction 0, direction 1); u[j], delta[j], z (B, L, E); xdbl[j] (B, L, >= dt_ld + 2N) with
    k at columns [dt_ld, dt_ld + N) and q at [dt_ld + N, dt_ld + 2N); D[j] (E); A_log[j] (E, N)
    for Mamba, None for Longhorn. The arithmetic runs in float32 (float64 when given float64);
    out has the inputs' promoted dtype."""
    step = SCANS[recurrence]
    acts = [*u, *delta, *xdbl, z]
    dt = acts[0].dtype
    for t in acts[1:]:
        dt = torch.promote_types(dt, t.dtype)
    work = dt if dt == torch.float64 else torch.float32
    cv = lambda t: t if t is None or t.dtype == work else t.to(work)  # noqa: E731
    if OWN_PARAM[recurrence] and (A_log is None or A_log[0] is None or A_log[1] is None):
        raise ValueError(f"scan_bidir_reference: the {recurrence} recurrence needs A_log for both directions")
    A = A_log if A_log is not None else (None, None)
    ys = []
    for j in (0, 1):
        k = xdbl[j][..., dt_ld:dt_ld + N]
        q = xdbl[j][..., dt_ld + N:dt_ld + 2 * N]
        args = [cv(u[j]), cv(delta[j]), cv(k), cv(q)]
        if j:
            args = [t.flip(1) for t in args]
        y = step(*args, cv(D[j]), cv(A[j]) if OWN_PARAM[recurrence] else None)
        ys.append(y.flip(1) if j else y)
    out = 0.5 * F.silu(cv(z)) * (ys[0] + ys[1])
    return out if out.dtype == dt else out.to(dt)


def resize_pos_embed(pos, G, G2):
    """pos_embed (1, G*G + 1, D) of a G x G patch grid -> (1, G2*G2 + 1, D): the class token's row
    (row G*G // 2, the middle) kept, the patch rows resampled bicubically on the grid
    (torch.nn.functional.interpolate, align_corners=False: what vil_pos_embed_resize in
    formats/checkpoint.c computes)"""
    if G == G2:
        return pos
    t, t2 = G * G // 2, G2 * G2 // 2
    Dm = pos.shape[-1]
    patches = torch.cat([pos[:, :t], pos[:, t + 1:]], 1)  # (1, G*G, D)
    grid = patches.reshape(1, G, G, Dm).permute(0, 3, 1, 2)
    dt = grid.dtype
    grid = F.interpolate(grid.float() if dt not in (torch.float32, torch.float64) else grid,
                         size=(G2, G2), mode="bicubic", align_corners=False).to(dt)
    patches = grid.permute(0, 2, 3, 1).reshape(1, G2 * G2, Dm)
    return torch.cat([patches[:, :t2], pos[:, t:t + 1], patches[:, t2:]], 1)
