#!/usr/bin/env python3
"""vil's CPU path against PyTorch in float64 with autograd: the whole network (logits, loss, the
input gradient and every parameter gradient that tools/ref_dump.c computed) against the vil
package's module (python/vil/model.py on its plain PyTorch scan: middle class token, the
backward direction's conv over the reversed tokens, SiLU(z) gate, (y_f + y_b) / 2, add + RMSNorm
with the residual kept apart), written from doc/models.md and doc/scans.md, never from vil's C:
    build/tools/ref_dump DIR vil && python3 tools/torch_reference.py DIR
With --scan, vil's CPU bidirectional scan alone (tools/scan_dump.c, one recurrence per file)
against the package's reference (python/vil/reference.py: SCANS, one function per recurrence of
vil/rec/list.h, and scan_bidir_reference), forward and every gradient:
    build/tools/scan_dump --rec mamba FILE && python3 tools/torch_reference.py --scan FILE
A file of the causal op (scan_dump --causal: direction 0 alone, out = SiLU(z) y_0, doc/scans.md
"One direction") is checked against SCANS' direction gated the same way.
The math has one copy, in the package; this script reads the files and compares. Exits 1 when
any relative error exceeds the tolerance."""
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

# the math lives in the vil package (python/vil/reference.py, python/vil/model.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import vil  # noqa: E402
from vil.reference import SCANS, scan_bidir_reference  # noqa: E402,F401

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


def config_of(P, img_size):
    """the model config a state dict P implies at img_size (doc/models.md "Architecture from a
    checkpoint alone", for the files these checks make)"""
    w = P["patch_embed.proj.weight"]
    R = P["layers.0.mixer.dt_proj.weight"].shape[1]
    G = int(round((P["pos_embed"].shape[1] - 1) ** 0.5))
    patch = w.shape[-1]
    return {"arch": "vim" if "layers.0.mixer.A_log" in P else "vil", "img_size": img_size, "patch_size": patch,
            "stride": (img_size - patch) // (G - 1) if G > 1 else patch, "in_chans": w.shape[1],
            "embed_dim": w.shape[0], "depth": 1 + max(int(k.split(".")[1]) for k in P if k.startswith("layers.")),
            "d_state": (P["layers.0.mixer.x_proj.weight"].shape[0] - R) // 2, "dt_rank": R,
            "expand": P["layers.0.mixer.in_proj.weight"].shape[0] // 2 // w.shape[0],
            "d_conv": P["layers.0.mixer.conv1d.weight"].shape[-1], "num_classes": P["head.weight"].shape[0]}


def forward(P, img, depth=None, vim=None):
    """logits of images img under the parameters P (name -> tensor, autograd flows into them):
    the package's module (python/vil/model.py) on the plain PyTorch scan, in P's dtype.
    depth and vim are implied by P (kept for the callers that pass them)."""
    with torch.random.fork_rng(devices=[]):  # the module's init draws nothing from the caller's generator
        model = vil.Classifier(config_of(P, img.shape[-1]), use_vil_ops=False).eval()
    call = getattr(getattr(torch, "func", None), "functional_call", None) or torch.nn.utils.stateless.functional_call
    return call(model, dict(P), (img,))


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def bidir_scan(rec, inp):
    """vil's scan_bidir_forward / backward for recurrence rec (the package's
    vil.reference.scan_bidir_reference: out = 0.5 SiLU(z) (y_0 + y_1), direction 1 on the reversed
    tokens); the gradients of out against inp["dout"]"""
    own = "A_log0" in inp
    names = ["u0", "u1", "delta0", "delta1", "k0", "k1", "q0", "q1", "D0", "D1", "z"]
    names += ["A_log0", "A_log1"] if own else []
    x = {n: inp[n].double().detach().clone().requires_grad_(True) for n in names}
    N = x["k0"].shape[-1]
    xdbl = [torch.cat([x[f"k{j}"], x[f"q{j}"]], -1) for j in (0, 1)]  # k | q, dt_ld = 0
    out = scan_bidir_reference([x["u0"], x["u1"]], [x["delta0"], x["delta1"]], xdbl, x["z"], [x["D0"], x["D1"]],
                               [x["A_log0"], x["A_log1"]] if own else None, recurrence=rec, dt_ld=0, N=N)
    out.backward(inp["dout"].double())
    r = {"out": out.detach(), "dz": x["z"].grad}
    for j in (0, 1):
        r[f"du{j}"], r[f"ddelta{j}"] = x[f"u{j}"].grad, x[f"delta{j}"].grad
        r[f"dk{j}"], r[f"dq{j}"], r[f"dD{j}"] = x[f"k{j}"].grad, x[f"q{j}"].grad, x[f"D{j}"].grad
        r[f"ddelta_sum{j}"] = x[f"delta{j}"].grad.sum((0, 1))
        if own:
            r[f"dA_log{j}"] = x[f"A_log{j}"].grad
    return r


def causal_scan(rec, inp):
    """vil's causal scan (scan_bidir_forward / backward with causal = 1) for recurrence rec:
    out = SiLU(z) y_0, y_0 the package's SCANS[rec] over the tokens in order; the gradients of
    out against inp["dout"]"""
    own = "A_log0" in inp
    names = ["u0", "delta0", "k0", "q0", "D0", "z"] + (["A_log0"] if own else [])
    x = {n: inp[n].double().detach().clone().requires_grad_(True) for n in names}
    y = SCANS[rec](x["u0"], x["delta0"], x["k0"], x["q0"], x["D0"], x["A_log0"] if own else None)
    out = F.silu(x["z"]) * y
    out.backward(inp["dout"].double())
    r = {"out": out.detach(), "dz": x["z"].grad, "du0": x["u0"].grad, "ddelta0": x["delta0"].grad,
         "dk0": x["k0"].grad, "dq0": x["q0"].grad, "dD0": x["D0"].grad, "ddelta_sum0": x["delta0"].grad.sum((0, 1))}
    if own:
        r["dA_log0"] = x["A_log0"].grad
    return r


def check_scan(path):
    """vil's CPU scan in path (tools/scan_dump.c) against its recurrence's reference; and the
    comparison sees the recurrence: every other recurrence's reference of the same inputs
    differs from vil's output beyond the tolerance"""
    rec = metadata(path).get("recurrence", "longhorn")
    causal = metadata(path).get("causal") == "1"
    op, dirs, what = (causal_scan, (0,), "causal scan") if causal else (bidir_scan, (0, 1), "scan")
    vil = load_file(path)
    if rec not in SCANS:
        print(f"FAIL {rec}: no reference of this recurrence in python/vil/reference.py's SCANS")
        print("0 passed, 1 failed")
        return 1
    ref = op(rec, vil)
    bad, n = [], 0
    for name, want in ref.items():
        e = rel(vil[name].double(), want)
        n += 1
        if e > TOL:
            bad.append(name)
        print(f"{'ok  ' if e <= TOL else 'FAIL'} {rec} {what} {name:14s} rel err {e:.3e}")
    E, N = vil["u0"].shape[2], vil["k0"].shape[2]
    others = dict(vil)
    for j in dirs:  # S4D-real's A_log for a recurrence that reads one, where these have none
        others.setdefault(f"A_log{j}", torch.log(torch.arange(1, N + 1, dtype=torch.float64)).expand(E, N))
    for other in SCANS:
        if other == rec:
            continue
        e = rel(vil["out"].double(), op(other, others)["out"])
        n += 1
        if e <= TOL:
            bad.append(f"{other} reference")
        print(f"{'ok  ' if e > TOL else 'FAIL'} {rec} {what} out against {other}'s reference: rel err {e:.3e} "
              f"(must exceed {TOL})")
    print(f"{rec} {what}: B {vil['u0'].shape[0]}, L {vil['u0'].shape[1]}, E {E}, N {N}, {n} checks (tolerance {TOL})")
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
