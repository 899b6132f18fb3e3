"""files.py: models in and out of vil's files, and images through vil's evaluation transform.
vil.load reads anything libvil reads (vil_classifier_load: checkpoints, run folders, bare state
dicts, ViM .pth) into a vil.Classifier; vil.save writes the safetensors checkpoint vil reads
(doc/formats.md, as formats/checkpoint.c writes it) in pure Python, or a .pth; vil.read_image
is vil classify's transform of one image file (vil_transform_file)."""
import collections
import ctypes
import json
import os
import secrets
import sys

import torch

from . import _clib
from .model import DEFAULTS, Classifier


def _unwrap(model):
    """the Classifier inside DistributedDataParallel / DataParallel (.module) or torch.compile
    (._orig_mod)"""
    for attr in ("_orig_mod", "module"):
        while hasattr(model, attr) and isinstance(getattr(model, attr), torch.nn.Module):
            model = getattr(model, attr)
    if not isinstance(model, Classifier):
        raise TypeError(f"vil: {type(model).__name__} is not a vil.Classifier (vil.load or vil.Classifier make one)")
    return model


def load(path, img_size=None, device="cpu", *, ema=False, use_vil_ops=True, drop_path=0.0):
    """A vil.Classifier (a torch.nn.Module) from any file vil reads: a vil checkpoint, a bare
    safetensors or .pth state dict (the architecture inferred from the shapes), a published ViM
    .pth, or a `vil train` run folder (its best.safetensors, else last.safetensors).

    img_size: the resolution to run at (None: the file's); another one interpolates the position
    embedding as vil does. ema: a .pth's model_ema or a run folder's ema.safetensors.
    use_vil_ops: the scans on vil's ops (False: the plain PyTorch reference). drop_path: the
    stochastic depth rate training mode applies (files do not carry it to the module).
    The module keeps the file's evaluation transform (module.vil_transform, for vil.read_image),
    its class names (module.class_names) and step (module.vil_step)."""
    lib = _clib.lib()
    ctx = _clib.cpu_context(torch.get_num_threads())
    opts = _clib.LoadOpts(img_size=int(img_size or 0), ema=1 if ema else 0)
    h = ctypes.c_void_p()
    with ctx.lock:
        _clib.check(lib.vil_classifier_load(ctx.h, os.fsencode(os.fspath(path)), ctypes.byref(opts), ctypes.byref(h)),
                    "vil_classifier_load")
        try:
            info = _clib.ClassifierInfo()
            _clib.check(lib.vil_classifier_get_info(h, ctypes.byref(info)), "vil_classifier_get_info")
            params = collections.OrderedDict()
            for i in range(lib.vil_classifier_param_count(h)):
                pi = _clib.ParamInfo()
                _clib.check(lib.vil_classifier_param_get_info(h, i, ctypes.byref(pi)), "vil_classifier_param_get_info")
                t = torch.empty(tuple(pi.shape[:pi.ndim]), dtype=torch.float32)
                _clib.check(lib.vil_classifier_param_read(h, pi.name, ctypes.c_void_p(t.data_ptr()), pi.numel, 1),
                            "vil_classifier_param_read")
                params[pi.name.decode()] = t
            tr = _clib.Transform()
            _clib.check(lib.vil_classifier_get_transform(h, ctypes.byref(tr)), "vil_classifier_get_transform")
            names = [_clib.text(lib.vil_classifier_class_name(h, i)) for i in range(info.n_classes)] \
                if info.has_class_names else None
            family, name = _clib.text(info.family), _clib.text(info.name)  # strings that live with the model
        finally:
            lib.vil_classifier_free(h)
    cfg = {"name": name or family, "arch": family, "img_size": info.img_size,
           "patch_size": info.patch_size, "stride": info.stride, "in_chans": info.in_chans,
           "embed_dim": info.embed_dim, "depth": info.depth, "d_state": info.d_state,
           "dt_rank": params["layers.0.mixer.dt_proj.weight"].shape[1], "expand": info.d_inner // info.embed_dim,
           "d_conv": params["layers.0.mixer.conv1d.weight"].shape[-1], "num_classes": info.n_classes,
           "drop_path": drop_path, "dt_init": "zero", "pos_embed": "learned" if "pos_embed" in params else "none"}
    with torch.random.fork_rng(devices=[]):  # the module's own init draws nothing from the caller's generator
        model = Classifier(cfg, use_vil_ops=use_vil_ops)
    if list(model.state_dict()) != list(params):
        raise _clib.VilError(f"vil.load: the module's tensors {list(model.state_dict())[:4]}... differ from the "
                             f"file's {list(params)[:4]}...: the package and libvil disagree on the parameter table")
    model.load_state_dict(params, strict=True)
    model.vil_transform = {"img_size": tr.img_size, "channels": tr.channels, "crop_pct": _short(tr.crop_pct),
                           "mean": [_short(tr.mean[c]) for c in range(tr.channels)],
                           "std": [_short(tr.std[c]) for c in range(tr.channels)]}
    model.class_names = names
    model.vil_step = int(info.step)
    model.vil_source = os.fspath(path)
    return model.to(device)


def _short(f):
    """a float32 as the short decimal it was written as (0.485, not 0.48500001430511475)"""
    return float(f"{f:.7g}")


def _transform(model_or_transform):
    t = model_or_transform
    if isinstance(t, torch.nn.Module):
        t = _unwrap(t).vil_transform
    if not isinstance(t, dict):
        raise TypeError("vil.read_image: a vil.Classifier or a transform dict "
                        "{img_size, channels, crop_pct, mean, std} expected")
    return t


def read_image(path, model, crop_pct=None):
    """The image file at path (JPEG, PNG, BMP, GIF, PNM, ...: the format from the bytes) through
    vil's evaluation transform (vil classify's and vil eval's: the shorter side resized to
    img_size / crop_pct, bicubic and Pillow-exact, a centre crop, (x / 255 - mean) / std), as a
    float32 tensor (C, img_size, img_size). model: a vil.Classifier (its vil_transform, which
    set_img_size keeps at its size) or such a dict; crop_pct: None for the model's."""
    t = _transform(model)
    C, S = int(t["channels"]), int(t["img_size"])
    tr = _clib.Transform(img_size=S, channels=C, crop_pct=float(crop_pct if crop_pct is not None else t["crop_pct"]))
    if len(t["mean"]) != C or len(t["std"]) != C:
        raise ValueError(f"vil.read_image: {len(t['mean'])} means and {len(t['std'])} stds for {C} channels")
    for c in range(C):
        tr.mean[c], tr.std[c] = float(t["mean"][c]), float(t["std"][c])
    out = torch.empty((C, S, S), dtype=torch.float32)
    lib = _clib.lib()
    _clib.check(lib.vil_transform_file(ctypes.byref(tr), os.fsencode(os.fspath(path)), ctypes.c_void_p(out.data_ptr())),
                "vil_transform_file")
    return out


# ---- saving ----
def metadata(model, step=None):
    """vil's checkpoint metadata of a Classifier (doc/formats.md "Metadata"), as strings"""
    m = _unwrap(model)
    c = m.config
    cfg = {k: c[k] for k in DEFAULTS}
    meta = {"format": "pt", "vil.config": json.dumps(cfg, separators=(",", ":"), ensure_ascii=False),
            "vil.img_size": str(c["img_size"]), "vil.step": str(int(m.vil_step if step is None else step))}
    names = m.class_names
    if names is not None:
        if len(names) != c["num_classes"]:
            raise ValueError(f"vil.save: {len(names)} class names for a head of {c['num_classes']} classes "
                             f"(reset_classifier(n, class_names) sets both)")
        meta["vil.class_names"] = json.dumps([str(n) for n in names], separators=(",", ":"), ensure_ascii=False)
    t = m.vil_transform
    if t:
        if int(t["channels"]) != c["in_chans"] or len(t["mean"]) != c["in_chans"] or len(t["std"]) != c["in_chans"]:
            raise ValueError(f"vil.save: the evaluation transform has {t['channels']} channels, the model "
                             f"{c['in_chans']}")
        if not 0 < float(t["crop_pct"]) <= 1:
            raise ValueError(f"vil.save: crop_pct {t['crop_pct']} outside (0, 1]")
        ev = {"crop_pct": _short(t["crop_pct"]), "resize": "bicubic", "mean": [_short(v) for v in t["mean"]],
              "std": [_short(v) for v in t["std"]]}
        meta["vil.eval"] = json.dumps(ev, separators=(",", ":"))
    return meta


def _tensors(model):
    out = collections.OrderedDict()
    for k, v in _unwrap(model).state_dict().items():
        t = v.detach().to(device="cpu", dtype=torch.float32).contiguous()
        if not torch.isfinite(t).all():
            raise ValueError(f"vil.save: {k} holds values that are not finite; vil refuses such a checkpoint")
        out[k] = t
    return out


def safetensors_bytes(tensors, meta):
    """the bytes of a safetensors file: 8-byte little-endian header length, the JSON header
    (padded with spaces to a multiple of 8), the float32 data in the tensors' order"""
    if sys.byteorder != "little":
        raise RuntimeError("vil.save: safetensors data is little-endian; this machine is not")
    header, at = {"__metadata__": meta}, 0
    for k, t in tensors.items():
        n = t.numel() * 4
        header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + n]}
        at += n
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    h += b" " * (-len(h) % 8)
    parts = [len(h).to_bytes(8, "little"), h]
    parts += [ctypes.string_at(t.data_ptr(), t.numel() * 4) for t in tensors.values()]
    return b"".join(parts)


def _atomic(path, write):
    """write(tmp) then fsync and rename over path: a reader sees the old file or the new one"""
    path = os.fspath(path)
    d, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(d, f".{base}.tmp.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def save(model, path, step=None):
    """Writes a vil.Classifier as a checkpoint vil reads (vil eval, vil classify, vil_classifier_load,
    vil.load): by the extension, .safetensors (vil's: float32 tensors under vil's names and order,
    the config, image size, step, class names and evaluation transform in its metadata) or .pth
    ({'model': state dict, 'vil_metadata': the same metadata}, which torch.load(...,
    weights_only=True) reads). Written atomically. step: the training step to record (None: the
    model's vil_step)."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in (".safetensors", ".pth"):
        raise ValueError(f"vil.save: '{path}': vil reads checkpoints as NAME.safetensors or NAME.pth; "
                         "name the output with one of those extensions")
    meta = metadata(model, step)
    tensors = _tensors(model)
    if ext == ".safetensors":
        data = safetensors_bytes(tensors, meta)

        def write(tmp):
            with open(tmp, "wb") as f:
                f.write(data)
    else:
        obj = {"model": tensors, "vil_metadata": {k: v for k, v in meta.items() if k != "format"}}

        def write(tmp):
            torch.save(obj, tmp)
    _atomic(path, write)
