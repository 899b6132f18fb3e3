"""model.py: ViL and ViM as a torch.nn.Module with vil's parameter names, shapes, order and math
(doc/models.md): patch embedding, the class token in the middle, the position embedding, blocks
of add + RMSNorm and a bidirectional mixer, the final norm and the head on the class token. Its
state_dict is a vil checkpoint's tensors, key for key and in order, so vil.save writes it and
vil.load fills it. The scans run on vil's ops (vil.ops.scan_bidir) unless use_vil_ops is False
(then vil.reference's plain PyTorch, float64-capable)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import ops, reference

# vil/config.c's vil_config_default; the keys of a checkpoint's vil.config, in its order
DEFAULTS = {"name": "vil_tiny", "arch": "vil", "img_size": 224, "patch_size": 16, "stride": 16, "in_chans": 3,
            "embed_dim": 192, "depth": 24, "d_state": 16, "dt_rank": 0, "expand": 2, "d_conv": 4,
            "num_classes": 1000, "drop_path": 0.0, "dt_init": "zero", "pos_embed": "learned", "family": "vim",
            "stream_len": 8, "stream_chunk": 0}
ARCH_RECURRENCE = {"vil": "longhorn", "vim": "mamba"}
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
GRAY_MEAN, GRAY_STD = 0.449, 0.226  # data/recipe.h
CROP_PCT = 0.875


def make_config(config=None, **kw):
    """A full model config (the keys of DEFAULTS) from a partial one, dt_rank resolved, checked as
    vil_config_finalize checks it; unknown keys are errors."""
    c = dict(DEFAULTS)
    given = {**(config or {}), **kw}
    for k, v in given.items():
        if k not in DEFAULTS:
            raise ValueError(f"vil: unknown config key {k!r}; the keys are {', '.join(DEFAULTS)}")
        c[k] = v
    if "name" not in given:  # the papers' names, as vil names a model it infers
        size = {192: "tiny", 384: "small", 768: "base"}.get(int(c["embed_dim"]))
        c["name"] = f"{c['arch']}_{size}" if size and int(c["depth"]) == 24 else f"{c['arch']}_d{int(c['embed_dim'])}"
    for k in DEFAULTS:
        if isinstance(DEFAULTS[k], int):
            c[k] = int(c[k])
    c["drop_path"] = float(c["drop_path"])
    if c["arch"] not in ARCH_RECURRENCE:
        raise ValueError(f"vil: arch {c['arch']!r}; one of {', '.join(ARCH_RECURRENCE)}")
    if c["family"] != "vim":  # the stream family (vil/stream.c) is vil's alone: vil eval reads it
        raise ValueError(f"vil: family {c['family']!r}: this module is ViL/ViM's network (family vim); a stream "
                         f"model is evaluated with `vil eval`")
    if c["in_chans"] not in (1, 3):
        raise ValueError(f"vil: in_chans {c['in_chans']} (1 or 3)")
    if c["img_size"] < c["patch_size"] or (c["img_size"] - c["patch_size"]) % c["stride"]:
        raise ValueError(f"vil: img_size {c['img_size']} does not fit patch_size {c['patch_size']} at stride "
                         f"{c['stride']}: (img_size - patch_size) must be a multiple of the stride")
    if c["pos_embed"] not in ("learned", "none"):
        raise ValueError(f"vil: pos_embed {c['pos_embed']!r}; learned or none")
    if not 0 <= c["drop_path"] < 1:
        raise ValueError(f"vil: drop_path {c['drop_path']} outside [0, 1)")
    for k in ("embed_dim", "depth", "d_state", "expand", "d_conv", "num_classes", "patch_size", "stride"):
        if c[k] < 1:
            raise ValueError(f"vil: {k} {c[k]} must be positive")
    if c["dt_rank"] == 0:
        c["dt_rank"] = (c["embed_dim"] + 15) // 16
    return c


def grid_of(c, img_size=None):
    return ((img_size or c["img_size"]) - c["patch_size"]) // c["stride"] + 1


def default_transform(c):
    """vil's evaluation transform for a model whose file says nothing: crop_pct 0.875, ImageNet's
    mean and std (gray: their mean), as vil_eval_spec_resolve gives"""
    gray = c["in_chans"] == 1
    return {"img_size": c["img_size"], "channels": c["in_chans"], "crop_pct": CROP_PCT,
            "mean": [GRAY_MEAN] if gray else list(IMAGENET_MEAN), "std": [GRAY_STD] if gray else list(IMAGENET_STD)}


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return reference.rmsnorm(x, self.weight)


class PatchEmbed(nn.Module):
    def __init__(self, in_chans, dim, patch, stride):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, patch, stride=stride)

    def forward(self, img):  # (B, C, H, W) -> (B, M, D), patches in row-major grid order
        return self.proj(img).flatten(2).transpose(1, 2)


class Mixer(nn.Module):
    """One block's mixer (doc/models.md "The mixer"): in_proj to x | z, per direction a causal
    depthwise conv1d + SiLU (direction 1 over the reversed tokens), x_proj to [dt_low | k | q],
    dt_proj to delta, then the bidirectional scan with its gate and average, and out_proj.
    Parameters in the order of vil's table: A_log, D, A_b_log, D_b, in_proj, conv1d, x_proj,
    dt_proj, conv1d_b, x_proj_b, dt_proj_b, out_proj."""

    def __init__(self, D, E, N, R, K, recurrence):
        super().__init__()
        self.recurrence, self.E, self.N, self.R, self.K = recurrence, E, N, R, K
        own = reference.OWN_PARAM[recurrence]
        if own:
            self.A_log = nn.Parameter(torch.empty(E, N))
        self.D = nn.Parameter(torch.ones(E))
        if own:
            self.A_b_log = nn.Parameter(torch.empty(E, N))
        self.D_b = nn.Parameter(torch.ones(E))
        self.in_proj = nn.Linear(D, 2 * E, bias=False)
        self.conv1d = nn.Conv1d(E, E, K, groups=E, padding=K - 1)
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, E)
        self.conv1d_b = nn.Conv1d(E, E, K, groups=E, padding=K - 1)
        self.x_proj_b = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj_b = nn.Linear(R, E)
        self.out_proj = nn.Linear(E, D, bias=False)

    def forward(self, x, use_vil_ops=True):  # (B, L, D) -> (B, L, D)
        E, R = self.E, self.R
        conv_w, conv_b = (self.conv1d.weight, self.conv1d_b.weight), (self.conv1d.bias, self.conv1d_b.bias)
        if use_vil_ops:
            # in_proj as its two halves: x and z come out as tensors of their own, so that their
            # gradients are not scattered into a (B, L, 2E) buffer and added (the same products)
            w = self.in_proj.weight
            xs, z = F.linear(x, w[:E]), F.linear(x, w[E:])
            u0, u1 = ops.conv1d_silu_bidir(xs, conv_w, conv_b)
        else:
            xz = self.in_proj(x)
            xs, z = xz[..., :E], xz[..., E:]
            u0, u1 = reference.conv1d_silu_bidir_reference(xs, conv_w, conv_b)
        xd0, xd1 = self.x_proj(u0), self.x_proj_b(u1)  # [dt_low (R) | k (N) | q (N)]
        d0, d1 = self.dt_proj(xd0[..., :R]), self.dt_proj_b(xd1[..., :R])
        A = (self.A_log, self.A_b_log) if reference.OWN_PARAM[self.recurrence] else None
        scan = ops.scan_bidir if use_vil_ops else reference.scan_bidir_reference
        y = scan((u0, u1), (d0, d1), (xd0, xd1), z, (self.D, self.D_b), A, recurrence=self.recurrence, dt_ld=R,
                 N=self.N)
        return self.out_proj(y)


class Block(nn.Module):
    def __init__(self, D, E, N, R, K, recurrence):
        super().__init__()
        self.mixer = Mixer(D, E, N, R, K, recurrence)
        self.norm = RMSNorm(D)


class Classifier(nn.Module):
    """ViL (Longhorn recurrence, arch "vil") or ViM (Mamba, arch "vim"), as vil computes it.

    Classifier(config, use_vil_ops=True): config is a dict of vil's model keys (vil.model.DEFAULTS;
    missing keys take vil's defaults). state_dict() keys are vil's checkpoint keys in vil's order.
    forward(images (B, C, H, W)) -> logits (B, classes); forward_features -> the tokens after the
    final norm (B, L, D); forward_head picks the class token's row and applies the head.
    Training mode applies drop path (config drop_path, per sample, as vil). reset_classifier(n)
    puts a new head of n classes; set_img_size(s) moves the position embedding to another size.

    Attributes beside the parameters: config (the keys above), recurrence ("longhorn" / "mamba"),
    vil_transform (the evaluation transform vil.read_image applies), class_names (a list, or
    None), vil_step (the training step a checkpoint records), use_vil_ops."""

    def __init__(self, config=None, use_vil_ops=True, **kw):
        super().__init__()
        c = make_config(config, **kw)
        self.config = c
        self.recurrence = ARCH_RECURRENCE[c["arch"]]
        self.use_vil_ops = use_vil_ops
        D, E, N, R, K = c["embed_dim"], c["expand"] * c["embed_dim"], c["d_state"], c["dt_rank"], c["d_conv"]
        G = grid_of(c)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        # pos_embed none: no such parameter, the scan's order the only position (doc/models.md)
        self.pos_embed = nn.Parameter(torch.zeros(1, G * G + 1, D)) if c["pos_embed"] == "learned" else None
        self.patch_embed = PatchEmbed(c["in_chans"], D, c["patch_size"], c["stride"])
        self.head = nn.Linear(D, c["num_classes"])
        self.layers = nn.ModuleList(Block(D, E, N, R, K, self.recurrence) for _ in range(c["depth"]))
        self.norm_f = RMSNorm(D)
        self.vil_transform = default_transform(c)
        self.class_names = None
        self.vil_step = 0
        self.init_weights()

    # ---- sizes ----
    @property
    def family(self):
        return self.config["arch"]

    @property
    def grid(self):
        return grid_of(self.config)

    @property
    def cls_pos(self):
        return self.grid * self.grid // 2

    @property
    def num_classes(self):
        return self.config["num_classes"]

    # ---- initialization (doc/models.md "Initialization"), from torch's generator ----
    @torch.no_grad()
    def init_weights(self):
        c = self.config
        nn.init.normal_(self.cls_token, std=0.02)
        if self.pos_embed is not None:
            nn.init.normal_(self.pos_embed, std=0.02)
        w = self.patch_embed.proj.weight
        fan_in = w[0].numel()
        nn.init.trunc_normal_(w, std=1.0, a=-2.0, b=2.0)
        w.mul_(math.sqrt(1.0 / fan_in) / 0.87962566103423978)
        nn.init.zeros_(self.patch_embed.proj.bias)
        self._init_head(self.head)
        depth = c["depth"]
        for i, blk in enumerate(self.layers):
            m = blk.mixer
            for lin in (m.in_proj, m.x_proj, m.x_proj_b, m.out_proj):
                bound = 1 / math.sqrt(lin.in_features)
                nn.init.uniform_(lin.weight, -bound, bound)
            m.out_proj.weight.div_(math.sqrt(depth))
            for conv in (m.conv1d, m.conv1d_b):
                bound = 1 / math.sqrt(m.K)
                nn.init.uniform_(conv.weight, -bound, bound)
                nn.init.uniform_(conv.bias, -bound, bound)
            for dtp in (m.dt_proj, m.dt_proj_b):
                bound = 1 / math.sqrt(m.R)
                nn.init.uniform_(dtp.weight, -bound, bound)
            m.D.fill_(1.0)
            m.D_b.fill_(1.0)
            blk.norm.weight.fill_(1.0)
            vim_dt = lambda: torch.exp(torch.empty(m.E).uniform_(math.log(1e-3), math.log(1e-1))).clamp_min(1e-4)  # noqa
            if reference.OWN_PARAM[self.recurrence]:
                A = torch.log(torch.arange(1, m.N + 1, dtype=torch.float32)).expand(m.E, m.N)
                m.A_log.copy_(A)
                m.A_b_log.copy_(A)
                dt = vim_dt()
                m.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
                m.dt_proj_b.bias.zero_()
            elif c["dt_init"] == "vim":
                for dtp in (m.dt_proj, m.dt_proj_b):
                    dt = vim_dt()
                    dtp.bias.copy_(torch.log(dt / (1 - dt)))  # logit: beta = sigmoid(bias) = dt
            else:
                m.dt_proj.bias.zero_()
                m.dt_proj_b.bias.zero_()
        self.norm_f.weight.fill_(1.0)

    @staticmethod
    @torch.no_grad()
    def _init_head(head):
        nn.init.normal_(head.weight, std=0.02)
        nn.init.zeros_(head.bias)

    # ---- the network ----
    def _drop(self, h, p):
        """drop path: each sample's h dropped with probability p, else scaled by 1 / (1 - p)"""
        if not self.training or p <= 0:
            return h
        keep = torch.empty((h.shape[0],) + (1,) * (h.dim() - 1), device=h.device).bernoulli_(1 - p)
        return h * (keep / (1 - p)).to(h.dtype)

    def tokens(self, img):
        """the residual stream entering block 0: patches with the class token in the middle, plus
        pos_embed (B, L, D)"""
        x = self.patch_embed(img)
        t = x.shape[1] // 2
        if x.shape[1] != self.grid * self.grid:
            raise ValueError(f"vil: a {tuple(img.shape[-2:])} image makes {x.shape[1]} patches; the model runs at "
                             f"{self.config['img_size']} px ({self.grid * self.grid} patches): "
                             f"set_img_size() to change it")
        x = x.to(self.cls_token.dtype)  # the residual stream in the parameters' dtype: float32 under autocast
        cls = self.cls_token.expand(x.shape[0], -1, -1).to(x.dtype)
        x = torch.cat([x[:, :t], cls, x[:, t:]], 1)
        return x + self.pos_embed if self.pos_embed is not None else x

    def forward_features(self, img):
        """(B, C, H, W) images -> (B, L, D): every token after the final RMSNorm"""
        rate, depth = self.config["drop_path"], self.config["depth"]
        dpr = [rate * i / (depth - 1) for i in range(depth)] if depth > 1 else [0.0]
        res, h = self.tokens(img), None
        for i, blk in enumerate(self.layers):
            if h is not None:
                res = res + self._drop(h, dpr[i - 1])
            h = blk.mixer(blk.norm(res), self.use_vil_ops)
        res = res + self._drop(h, rate)
        return self.norm_f(res)

    def forward_head(self, feats):
        return self.head(feats[:, self.cls_pos])

    def forward(self, img):
        return self.forward_head(self.forward_features(img))

    # ---- fine-tuning ----
    def reset_classifier(self, num_classes, class_names=None):
        """a new head (vil's init: normal, std 0.02; bias 0) of num_classes outputs"""
        old = self.head
        self.head = nn.Linear(old.in_features, num_classes, device=old.weight.device, dtype=old.weight.dtype)
        self._init_head(self.head)
        self.config["num_classes"] = int(num_classes)
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"vil: {len(class_names)} class names for {num_classes} classes")
        self.class_names = list(class_names) if class_names is not None else None

    @torch.no_grad()
    def set_img_size(self, img_size):
        """run at another resolution: the position embedding interpolated to the new grid
        (bicubic, the class token's row kept: vil_pos_embed_resize), the evaluation transform's
        size with it"""
        c = make_config(self.config, img_size=img_size)
        G, G2 = self.grid, grid_of(c)
        if self.pos_embed is not None:  # a model without one has nothing to move
            pos = reference.resize_pos_embed(self.pos_embed.data, G, G2)
            self.pos_embed = nn.Parameter(pos, requires_grad=self.pos_embed.requires_grad)
        self.config = c
        self.vil_transform = dict(self.vil_transform, img_size=c["img_size"])

    def extra_repr(self):
        c = self.config
        return (f"{c['arch']} ({self.recurrence}), {c['img_size']} px, patch {c['patch_size']} stride {c['stride']}, "
                f"D {c['embed_dim']}, depth {c['depth']}, N {c['d_state']}, {c['num_classes']} classes, "
                f"{'vil ops' if self.use_vil_ops else 'reference scan'}")
