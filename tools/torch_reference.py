#!/usr/bin/env python3
"""An independent PyTorch implementation of ViL / ViM, written the way the official ViM code
computes it (middle class token, flipped sequence for the backward direction, conv1d with
padding 3 cut to L, SiLU(z) gate per direction, (y_f + y_b.flip) / 2, fused add + RMSNorm with
an fp32 residual), run in float64 with autograd, against what vil's CPU path computed
(tools/ref_dump.c). Run on the GPU machine, where torch is installed:
    build/tools/ref_dump DIR vil && python3 tools/torch_reference.py DIR
With --scan, vil's CPU bidirectional scan alone (tools/scan_dump.c, one recurrence per file)
against the same recurrences (SCANS: one function per recurrence of vil/rec/list.h, written
from doc/scans.md), forward and every gradient:
    build/tools/scan_dump --rec mamba FILE && python3 tools/torch_reference.py --scan FILE
Exits 1 when any relative error exceeds the tolerance."""
import sys

import json
import struct

import torch
import torch.nn.functional as F

try:  # the official reader where it is installed (the GPU machine); a minimal one otherwise
    from safetensors import safe_open
    from safetensors.torch import load_file

    def metadata(path):
        with safe_open(path, "pt") as f:
            return f.metadata()
except ImportError:
    def _read(path):
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        return json.loads(raw[8:8 + n]), raw[8 + n:]

    def load_file(path):
        head, buf = _read(path)
        out = {}
        for k, v in head.items():
            if k == "__metadata__":
                continue
            assert v["dtype"] == "F32", v["dtype"]
            a, b = v["data_offsets"]
            out[k] = torch.frombuffer(bytearray(buf[a:b]), dtype=torch.float32).reshape(v["shape"])
        return out

    def metadata(path):
        return _read(path)[0].get("__metadata__", {})

TOL = 1e-4  # vil computes in float32; the reference in float64


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def longhorn_scan(u, delta, k, q, D):  # u, delta (B, L, E); k, q (B, L, N)
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


def direction(P, pre, sfx, x, z, vim):
    # x, z: (B, L, E) in this direction's token order
    L = x.shape[1]
    w = P[pre + "conv1d" + sfx + ".weight"]
    b = P[pre + "conv1d" + sfx + ".bias"]
    u = F.silu(F.conv1d(x.transpose(1, 2), w, b, padding=w.shape[-1] - 1, groups=w.shape[0])[..., :L]).transpose(1, 2)
    xd = u @ P[pre + "x_proj" + sfx + ".weight"].T
    R = P[pre + "dt_proj" + sfx + ".weight"].shape[1]
    N = (xd.shape[-1] - R) // 2
    dt_low, k, q = xd[..., :R], xd[..., R:R + N], xd[..., R + N:]
    delta = dt_low @ P[pre + "dt_proj" + sfx + ".weight"].T + P[pre + "dt_proj" + sfx + ".bias"]
    Dk = P[pre + "D" + sfx]
    if vim:
        y = mamba_scan(u, delta, k, q, P[pre + ("A_log" if sfx == "" else "A_b_log")], Dk)
    else:
        y = longhorn_scan(u, delta, k, q, Dk)
    return y * F.silu(z)


def forward(P, img, depth, vim):
    w = P["patch_embed.proj.weight"]
    D = w.shape[0]
    pos = P["pos_embed"]
    G = int(round((pos.shape[1] - 1) ** 0.5))
    S = (img.shape[-1] - w.shape[-1]) // (G - 1) if G > 1 else w.shape[-1]
    x = F.conv2d(img, w, P["patch_embed.proj.bias"], stride=S).flatten(2).transpose(1, 2)
    M = x.shape[1]
    t = M // 2
    cls = P["cls_token"].expand(x.shape[0], -1, -1)
    x = torch.cat([x[:, :t], cls, x[:, t:]], 1) + pos
    residual, h = None, x
    for i in range(depth):
        pre = f"layers.{i}.mixer."
        residual = h if residual is None else residual + h
        hn = rmsnorm(residual, P[f"layers.{i}.norm.weight"])
        xz = hn @ P[pre + "in_proj.weight"].T
        E = xz.shape[-1] // 2
        xx, z = xz[..., :E], xz[..., E:]
        yf = direction(P, pre, "", xx, z, vim)
        yb = direction(P, pre, "_b", xx.flip(1), z.flip(1), vim).flip(1)
        h = ((yf + yb) / 2) @ P[pre + "out_proj.weight"].T
    residual = residual + h
    hf = rmsnorm(residual, P["norm_f.weight"])
    return hf[:, t] @ P["head.weight"].T + P["head.bias"]


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def bidir_scan(rec, inp):
    """vil's scan_bidir_forward / backward for recurrence rec: out = 0.5 SiLU(z) (y_0 + y_1),
    direction 1 on the reversed tokens; the gradients of out against inp["dout"]"""
    own = "A_log0" in inp
    names = ["u0", "u1", "delta0", "delta1", "k0", "k1", "q0", "q1", "D0", "D1", "z"]
    names += ["A_log0", "A_log1"] if own else []
    x = {n: inp[n].double().detach().clone().requires_grad_(True) for n in names}
    step = SCANS[rec]
    y0 = step(x["u0"], x["delta0"], x["k0"], x["q0"], x["D0"], x.get("A_log0"))
    y1 = step(*(x[n].flip(1) for n in ("u1", "delta1", "k1", "q1")), x["D1"], x.get("A_log1")).flip(1)
    out = 0.5 * F.silu(x["z"]) * (y0 + y1)
    out.backward(inp["dout"].double())
    r = {"out": out.detach(), "dz": x["z"].grad}
    for j in (0, 1):
        r[f"du{j}"], r[f"ddelta{j}"] = x[f"u{j}"].grad, x[f"delta{j}"].grad
        r[f"dk{j}"], r[f"dq{j}"], r[f"dD{j}"] = x[f"k{j}"].grad, x[f"q{j}"].grad, x[f"D{j}"].grad
        r[f"ddelta_sum{j}"] = x[f"delta{j}"].grad.sum((0, 1))
        if own:
            r[f"dA_log{j}"] = x[f"A_log{j}"].grad
    return r


def check_scan(path):
    """vil's CPU scan in path (tools/scan_dump.c) against its recurrence's reference; and the
    comparison sees the recurrence: every other recurrence's reference of the same inputs
    differs from vil's output beyond the tolerance"""
    rec = metadata(path).get("recurrence", "longhorn")
    vil = load_file(path)
    if rec not in SCANS:
        print(f"FAIL {rec}: no reference of this recurrence in tools/torch_reference.py's SCANS")
        print("0 passed, 1 failed")
        return 1
    ref = bidir_scan(rec, vil)
    bad, n = [], 0
    for name, want in ref.items():
        e = rel(vil[name].double(), want)
        n += 1
        if e > TOL:
            bad.append(name)
        print(f"{'ok  ' if e <= TOL else 'FAIL'} {rec} scan {name:14s} rel err {e:.3e}")
    E, N = vil["u0"].shape[2], vil["k0"].shape[2]
    others = dict(vil)
    for j in (0, 1):  # S4D-real's A_log for a recurrence that reads one, where these have none
        others.setdefault(f"A_log{j}", torch.log(torch.arange(1, N + 1, dtype=torch.float64)).expand(E, N))
    for other in SCANS:
        if other == rec:
            continue
        e = rel(vil["out"].double(), bidir_scan(other, others)["out"])
        n += 1
        if e <= TOL:
            bad.append(f"{other} reference")
        print(f"{'ok  ' if e > TOL else 'FAIL'} {rec} scan out against {other}'s reference: rel err {e:.3e} "
              f"(must exceed {TOL})")
    print(f"{rec} scan: B {vil['u0'].shape[0]}, L {vil['u0'].shape[1]}, E {E}, N {N}, {n} checks (tolerance {TOL})")
    print(f"{n - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--scan":
        sys.exit(check_scan(sys.argv[2]))
    d = sys.argv[1]
    P = {k: v.double().requires_grad_(True) for k, v in load_file(f"{d}/model.safetensors").items()}
    meta = metadata(f"{d}/model.safetensors")
    inp = load_file(f"{d}/input.safetensors")
    ours = load_file(f"{d}/ours.safetensors")
    img = inp["img"].double().requires_grad_(True)
    targets = inp["targets"].double()
    depth = 1 + max(int(k.split(".")[1]) for k in P if k.startswith("layers."))
    vim = "layers.0.mixer.A_log" in P
    logits = forward(P, img, depth, vim)
    loss = -(targets * F.log_softmax(logits, -1)).sum(-1).mean()
    loss.backward()
    worst, bad = 0.0, []
    checks = [("logits", logits.detach(), ours["logits"]), ("loss", loss.detach().reshape(1), ours["loss"]),
              ("grad.img", img.grad, ours["grad.img"])]
    checks += [("grad." + k, v.grad, ours["grad." + k]) for k, v in P.items()]
    for name, ref, got in checks:
        e = rel(got.double(), ref)
        worst = max(worst, e)
        flag = "ok  " if e <= TOL else "FAIL"
        if e > TOL:
            bad.append(name)
        print(f"{flag} {name:45s} rel err {e:.3e}")
    print(f"{'ViM' if vim else 'ViL'}: {len(checks)} tensors, worst relative error {worst:.3e} (tolerance {TOL}); "
          f"metadata keys: {sorted(meta)}")
    print(f"{len(checks) - len(bad)} passed, {len(bad)} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
