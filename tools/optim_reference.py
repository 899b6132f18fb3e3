#!/usr/bin/env python3
"""The optimizers of vil against PyTorch: each DIR/CASE.safetensors that `test_optim --dump DIR`
wrote holds the start weights, the gradients of each step, vil's weights and optimizer state
after the steps, and the hyperparameters. AdamW, Adam and SGD are run with torch.optim.AdamW,
torch.optim.Adam and torch.optim.SGD (a weight-decay group and a group without it, as timm's
optimizer factory makes);
Lamb is timm's Lamb step (timm.optim.lamb, bias correction and grad averaging on, no global
clipping, trust_clip for lambc) written out below; all in float64. Run:
    build/tests/test_optim --dump DIR && python3 tools/optim_reference.py DIR
Exits 1 when any relative error exceeds the tolerance."""
import glob
import json
import os
import sys

import torch

from torch_reference import load_file, metadata

TOL = 1e-5  # vil computes in float32; the reference in float64


def lamb_step(params, grads, state, step, lr, beta1, beta2, eps, wd, trust_clip):
    # timm's Lamb for one param group of weight decay wd (timm.optim.lamb._single_tensor_lamb)
    bc1 = 1 - beta1 ** step
    bc2 = 1 - beta2 ** step
    for p, g in zip(params, grads):
        st = state.setdefault(p, {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)})
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        update = (m / bc1) / (v.sqrt() / bc2 ** 0.5 + eps)
        if wd != 0:
            update.add_(p, alpha=wd)
            w_norm, u_norm = p.norm(2.0), update.norm(2.0)
            ratio = torch.where(w_norm > 0, torch.where(u_norm > 0, w_norm / u_norm, 1.0), 1.0)
            if trust_clip:
                ratio = ratio.clamp(max=1.0)
            update.mul_(ratio)
        p.add_(update, alpha=-lr)


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def check(path):
    T = load_file(path)
    meta = metadata(path)
    h = json.loads(meta["hyper"])
    decay = set(filter(None, meta["decay"].split(",")))
    names = [k[3:] for k in T if k.startswith("p0.")]
    P = {n: T["p0." + n].double().clone() for n in names}
    groups = [[n for n in names if n in decay], [n for n in names if n not in decay]]
    opt, state = h["optimizer"], {}
    if opt in ("adamw", "adam"):
        cls = torch.optim.AdamW if opt == "adamw" else torch.optim.Adam
        o = cls([{"params": [P[n] for n in groups[0]], "weight_decay": h["wd"]},
                 {"params": [P[n] for n in groups[1]], "weight_decay": 0.0}],
                lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])
        slots = ["exp_avg", "exp_avg_sq"]
    elif opt == "sgd":
        o = torch.optim.SGD([{"params": [P[n] for n in groups[0]], "weight_decay": h["wd"]},
                             {"params": [P[n] for n in groups[1]], "weight_decay": 0.0}],
                            lr=h["lr"], momentum=h["momentum"], nesterov=bool(h["nesterov"]))
        slots = ["momentum_buffer"]
    else:
        o = None
        slots = ["exp_avg", "exp_avg_sq"]
    for s in range(h["steps"]):
        for n in names:
            P[n].grad = T[f"g{s}.{n}"].double()
        if o is not None:
            o.step()
            continue
        for gi, wd in ((0, h["wd"]), (1, 0.0)):
            ps = [P[n] for n in groups[gi]]
            lamb_step(ps, [p.grad for p in ps], state, s + 1, h["lr"], h["beta1"], h["beta2"], h["eps"], wd,
                      opt == "lambc")
    if o is not None:
        state = o.state
    checks = []
    for n in names:
        p0 = T["p0." + n].double()
        # the weights' change: what the optimizer did, not the start they share
        checks.append((f"{n} (change)", T["p." + n].double() - p0, P[n].detach() - p0))
        for j, slot in enumerate(slots):
            ref = state[P[n]][slot]
            if opt == "sgd" and h["momentum"] == 0:
                continue  # torch keeps no buffer without momentum
            checks.append((f"{n} {slot}", T[f"s{j}.{n}"].double(), ref))
    bad = 0
    worst = 0.0
    for name, got, ref in checks:
        e = rel(got, ref) if ref.norm() > 0 else got.norm().item()
        worst = max(worst, e)
        if e > TOL:
            bad += 1
            print(f"FAIL {os.path.basename(path)} {name:50s} rel err {e:.3e}")
    case = os.path.basename(path)[:-len(".safetensors")]
    print(f"{'ok  ' if not bad else 'FAIL'} {case}: {len(checks)} tensors, worst relative error {worst:.3e} "
          f"(tolerance {TOL})")
    return len(checks) - bad, bad


def main():
    files = sorted(glob.glob(os.path.join(sys.argv[1], "*.safetensors")))
    if not files:
        print(f"no cases in {sys.argv[1]}")
        print("0 passed, 1 failed")
        sys.exit(1)
    passed = failed = 0
    for f in files:
        p, b = check(f)
        passed, failed = passed + p, failed + b
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
