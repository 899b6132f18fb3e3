#!/usr/bin/python3
"""make_vim_pth.py: writes the small PyTorch checkpoints of tests/data/pth that `make test`
loads with vil's own .pth reader, and the float64 logits they must give.

Each checkpoint is what the official ViM training script (hustvl/Vim, vim/main.py) saves, at a
toy size: torch.save of {model, optimizer, lr_scheduler, epoch, model_ema, scaler: 'none',
args: argparse.Namespace} where model and model_ema are state_dict()s of an nn.Module laid out
as ViM's VisionMamba (the key names and order of the published files), optimizer is an AdamW
state_dict after one real step (float32 'step' tensors, exp_avg, exp_avg_sq), and args comes
from an argparse parser with ViM's own option names. The logits come from the independent
float64 forward of tools/torch_reference.py (written from doc/models.md and doc/scans.md), never from vil.

Run with Debian's torch:  /usr/bin/python3 tests/reference/make_vim_pth.py [OUT_DIR]
A random-weight file of the published ViM-Tiny size (not for the tests):
                          /usr/bin/python3 tests/reference/make_vim_pth.py --full FILE.pth [16|8] [vim|vil] [tiny|small]
Writes, per case NAME: NAME.pth, NAME.model.f64 and NAME.ema.f64 (logits (3, classes),
little-endian float64); for all cases: inputs.f32 (3, 3, 16, 16) normalized images, img0-2.png
(the same images, 16 x 16 RGB, which normalize to inputs.f32), cases.txt (one line per case),
and the odd files: NAME_state_dict.pth (a bare state dict), NAME_noema.pth (no model_ema).
"""
import argparse
import collections
import math
import os
import struct
import sys
import zlib

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import torch_reference  # noqa: E402  the float64 forward written from doc/

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "pth")
IMG, CH, CLASSES, N_IMAGES = 16, 3, 5, 3
MEAN = torch.tensor([0.485, 0.456, 0.406], dtype=torch.float32)
STD = torch.tensor([0.229, 0.224, 0.225], dtype=torch.float32)


class Mixer(nn.Module):
    """Parameters of mamba_simple.Mamba with bimamba_type v2, registered in its order: the
    module's own tensors (A_log, D, A_b_log, D_b) come first in state_dict, then submodules."""

    def __init__(self, D, N, vim, expand=2, d_conv=4):
        super().__init__()
        E, R = expand * D, math.ceil(D / 16)
        self.in_proj = nn.Linear(D, 2 * E, bias=False)
        self.conv1d = nn.Conv1d(E, E, d_conv, groups=E, padding=d_conv - 1)
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, E, bias=True)
        if vim:
            self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(E, 1))
        self.D = nn.Parameter(torch.ones(E))
        if vim:
            self.A_b_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(E, 1))
        self.conv1d_b = nn.Conv1d(E, E, d_conv, groups=E, padding=d_conv - 1)
        self.x_proj_b = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj_b = nn.Linear(R, E, bias=True)
        self.D_b = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, D, bias=False)


class RMSNorm(nn.Module):
    def __init__(self, D):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))


class Block(nn.Module):
    def __init__(self, D, N, vim):
        super().__init__()
        self.mixer = Mixer(D, N, vim)
        self.norm = RMSNorm(D)


class PatchEmbed(nn.Module):
    def __init__(self, P, S, D):
        super().__init__()
        self.proj = nn.Conv2d(CH, D, P, stride=S)


class VisionMamba(nn.Module):
    """VisionMamba's tensors in the published order: cls_token, pos_embed, patch_embed, head,
    layers, norm_f."""

    def __init__(self, P, S, D, depth, N, vim, img=IMG, classes=CLASSES):
        super().__init__()
        G = (img - P) // S + 1
        self.patch_embed = PatchEmbed(P, S, D)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, G * G + 1, D))
        self.head = nn.Linear(D, classes)
        self.layers = nn.ModuleList([Block(D, N, vim) for _ in range(depth)])
        self.norm_f = RMSNorm(D)


def vim_args(model_name, img=IMG, classes=CLASSES, data_set='CIFAR'):
    """An args Namespace as vim/main.py's parser builds it (its option names and defaults)."""
    p = argparse.ArgumentParser()
    p.add_argument('--batch-size', default=64, type=int)
    p.add_argument('--epochs', default=300, type=int)
    p.add_argument('--bce-loss', action='store_true')
    p.add_argument('--unscale-lr', action='store_true')
    p.add_argument('--model', default='deit_base_patch16_224', type=str)
    p.add_argument('--input-size', default=224, type=int)
    p.add_argument('--drop', type=float, default=0.0)
    p.add_argument('--drop-path', type=float, default=0.1)
    p.add_argument('--model-ema', action='store_true')
    p.add_argument('--no-model-ema', action='store_false', dest='model_ema')
    p.set_defaults(model_ema=True)
    p.add_argument('--model-ema-decay', type=float, default=0.99996)
    p.add_argument('--model-ema-force-cpu', action='store_true', default=False)
    p.add_argument('--opt', default='adamw', type=str)
    p.add_argument('--opt-eps', default=1e-8, type=float)
    p.add_argument('--opt-betas', default=None, type=float, nargs='+')
    p.add_argument('--clip-grad', type=float, default=None)
    p.add_argument('--momentum', type=float, default=0.9)
    p.add_argument('--weight-decay', type=float, default=0.05)
    p.add_argument('--sched', default='cosine', type=str)
    p.add_argument('--lr', type=float, default=5e-4)
    p.add_argument('--lr-noise', type=float, nargs='+', default=None)
    p.add_argument('--warmup-lr', type=float, default=1e-6)
    p.add_argument('--min-lr', type=float, default=1e-5)
    p.add_argument('--warmup-epochs', type=int, default=5)
    p.add_argument('--aa', type=str, default='rand-m9-mstd0.5-inc1')
    p.add_argument('--smoothing', type=float, default=0.1)
    p.add_argument('--reprob', type=float, default=0.25)
    p.add_argument('--mixup', type=float, default=0.8)
    p.add_argument('--cutmix', type=float, default=1.0)
    p.add_argument('--cutmix-minmax', type=float, nargs='+', default=None)
    p.add_argument('--data-path', default='/datasets01/imagenet_full_size/061417/', type=str)
    p.add_argument('--data-set', default='IMNET', type=str)
    p.add_argument('--output_dir', default='')
    p.add_argument('--device', default='cuda')
    p.add_argument('--seed', default=0, type=int)
    p.add_argument('--eval-crop-ratio', default=0.875, type=float)
    p.add_argument('--if_amp', action='store_true')
    p.add_argument('--local-rank', default=0, type=int)
    a = p.parse_args(['--model', model_name, '--input-size', str(img), '--data-set', data_set,
                      '--batch-size', '128', '--drop-path', '0.05', '--lr', '5e-4', '--opt-betas', '0.9', '0.999'])
    a.nb_classes, a.distributed, a.rank, a.world_size, a.gpu = classes, True, 0, 8, 0  # set by main.py
    return a


def scheduler_state():
    """What timm's CosineLRScheduler.state_dict() holds (plain values)."""
    return {'param_group_field': 'lr', '_initial_param_group_field': 'initial_lr', 'base_values': [5e-4],
            'metric': None, 't_in_epochs': True, 'noise_range_t': None, 'noise_pct': 0.67, 'noise_type': 'normal',
            'noise_std': 1.0, 'noise_seed': 42, 'initialize': True, 't_initial': 300, 'lr_min': 1e-5,
            'cycle_mul': 1.0, 'cycle_decay': 0.1, 'cycle_limit': 1, 'warmup_t': 5, 'warmup_lr_init': 1e-6,
            'warmup_prefix': False, 'k_decay': 1.0, 'warmup_steps': [9.98e-05]}


def randomize(model, scale, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log") or name.endswith("A_b_log"):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.weight") or name.endswith("norm_f.weight") or name.endswith(".D") or name.endswith(".D_b"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel() if p.dim() > 1 else p.numel()
                p.copy_(scale * torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))


def png(path, rgb):
    """A 16 x 16 RGB PNG (uint8 (H, W, 3)) with zlib alone."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + bytes(rgb[y].flatten().tolist()) for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xffffffff)
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(data)


def logits(state, inputs, depth, vim):
    P = {k: v.double() for k, v in state.items()}
    with torch.no_grad():
        return torch_reference.forward(P, inputs.double(), depth, vim)


def full_size(out, stride, arch, size):
    """A training checkpoint of a published size (Tiny D 192 / Small D 384, 24 layers, 224 px,
    1000 ImageNet classes; stride 16, or 8 as vim_t_midclstok_ft_78p3acc) with random weights:
    for trying the reader and the commands at scale. Not used by the tests (100+ MB)."""
    gen = torch.Generator().manual_seed(1)
    D, vim = {"tiny": 192, "small": 384}[size], arch == "vim"
    model = VisionMamba(16, stride, D, 24, 16, vim, img=224, classes=1000)
    ema = VisionMamba(16, stride, D, 24, 16, vim, img=224, classes=1000)
    randomize(model, 1.0, gen)
    randomize(ema, 1.0, gen)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    opt.step()
    name = f"{arch}_{size}_patch16{'_stride8' if stride == 8 else ''}_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2"
    torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict(), 'lr_scheduler': scheduler_state(),
                'epoch': 299, 'model_ema': ema.state_dict(), 'scaler': 'none',
                'args': vim_args(name, img=224, classes=1000, data_set='IMNET')}, out)
    print("wrote", out, sum(v.numel() for v in model.state_dict().values()), "parameters")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--full":
        a = sys.argv[2:] + [None] * 3
        full_size(a[0], int(a[1] or 16), a[2] or "vim", a[3] or "tiny")
        return
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(20261123)
    torch.manual_seed(20261123)
    # the images: uint8 RGB, their PNGs, and the normalization classify applies (ToTensor, Normalize)
    imgs = torch.randint(0, 256, (N_IMAGES, IMG, IMG, CH), generator=gen, dtype=torch.uint8)
    for i in range(N_IMAGES):
        png(os.path.join(OUT, f"img{i}.png"), imgs[i].numpy())
    inputs = ((imgs.float() / 255.0 - MEAN) / STD).permute(0, 3, 1, 2).contiguous()
    with open(os.path.join(OUT, "inputs.f32"), "wb") as f:
        f.write(inputs.numpy().astype("<f4").tobytes())

    cases = [("vim_p4s4", 4, 4, True), ("vim_p4s2", 4, 2, True), ("vil_p4s4", 4, 4, False)]
    D, depth, N = 16, 2, 4
    lines = []
    for name, P, S, vim in cases:
        model = VisionMamba(P, S, D, depth, N, vim)
        randomize(model, 1.0, gen)
        ema = VisionMamba(P, S, D, depth, N, vim)
        randomize(ema, 1.0, gen)
        # one real AdamW step gives the optimizer state the official files carry
        opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
        x = torch.randn(2, CH, IMG, IMG, generator=gen)
        out = torch_reference.forward(dict(model.named_parameters()), x, depth, vim)
        out.square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        model_name = f"{'vim' if vim else 'vil'}_test_patch{P}_stride{S}_{IMG}_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2"
        ckpt = {
            'model': model.state_dict(),
            'optimizer': opt.state_dict(),
            'lr_scheduler': scheduler_state(),
            'epoch': 299,
            'model_ema': ema.state_dict(),
            'scaler': 'none',
            'args': vim_args(model_name),
        }
        torch.save(ckpt, os.path.join(OUT, f"{name}.pth"))
        for which, sd in (("model", ckpt['model']), ("ema", ckpt['model_ema'])):
            lg = logits(sd, inputs, depth, vim)
            with open(os.path.join(OUT, f"{name}.{which}.f64"), "wb") as f:
                f.write(lg.numpy().astype("<f8").tobytes())
        params = sum(v.numel() for v in ckpt['model'].values())
        G = (IMG - P) // S + 1
        lines.append(f"{name} {'vim' if vim else 'vil'} img {IMG} patch {P} stride {S} grid {G} dim {D} "
                     f"depth {depth} state {N} classes {CLASSES} params {params}")
        if name == "vim_p4s4":
            torch.save(model.state_dict(), os.path.join(OUT, f"{name}_state_dict.pth"))
            noema = {k: ckpt[k] for k in ('model', 'epoch', 'args')}  # small: no optimizer either
            torch.save(noema, os.path.join(OUT, f"{name}_noema.pth"))
    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        f.write("# written by tests/reference/make_vim_pth.py: NAME arch img P patch S stride G grid D dim depth N classes K params COUNT\n")
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, ":", ", ".join(sorted(os.listdir(OUT))))


if __name__ == "__main__":
    main()
