#!/usr/bin/env python3
"""bench_timm.py: the peer in the same device call as `vil bench`: a timm model's training step
(bf16 autocast, AdamW, cross-entropy) and inference forward on random in-memory batches, the
way `vil bench` times vil's. Needs torch and timm (the lent GPU machine has both).

    python3 dev/peers/bench_timm.py --model deit_tiny_patch16_224 --batch 256 [--compile]
                                    [--img-size 224] [--steps 30] [--warmup 10]
"""
import argparse
import time

import torch
import torch.nn.functional as F
import timm


def timed(fn, steps, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="deit_tiny_patch16_224")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = timm.create_model(a.model, num_classes=1000, img_size=a.img_size).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    run = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=True)
    x = torch.randn(a.batch, 3, a.img_size, a.img_size, device=dev)
    y = torch.randint(0, 1000, (a.batch,), device=dev)

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(run(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    model.train()
    torch.cuda.reset_peak_memory_stats()
    t_train = timed(train_step, a.steps, a.warmup)
    peak_train = torch.cuda.max_memory_allocated() / 2**30

    model.eval()

    @torch.no_grad()
    def infer():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            run(x)

    torch.cuda.reset_peak_memory_stats()
    t_inf = timed(infer, a.steps, a.warmup)
    peak_inf = torch.cuda.max_memory_allocated() / 2**30
    print(f"peer {a.model} ({nparams:,} parameters) {'compiled' if a.compile else 'eager'} "
          f"B={a.batch} {a.img_size}px: train {a.batch / t_train:,.0f} img/s (peak {peak_train:.2f} GiB), "
          f"inference {a.batch / t_inf:,.0f} img/s (peak {peak_inf:.2f} GiB); "
          f"torch {torch.__version__}, timm {timm.__version__}, {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
