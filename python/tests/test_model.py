"""test_model.py: vil.load, the module, vil.save and vil.read_image against vil itself: the
module's logits against `vil classify`'s on vil-trained ViL and ViM models (fp32, 1e-5
relative), at their size and another; the module's tensors and facts against libvil's; the
plain PyTorch scan against vil's ops inside the model; the position embedding moved in PyTorch
against vil's; the evaluation transform; save and load round trips (.safetensors, .pth) read by
`vil classify`, `vil info` and vil.load; a ViM .pth (tests/data/pth) against its float64
logits; train mode, drop path, autocast; errors that say what. The fine-tuning round trip is
test_finetune.py. Run: /usr/bin/python3 python/tests/test_model.py [NAME]"""
import ctypes
import json
import os
import struct
import sys

from common import (CLASSES, REPO, SIZE, TMP, classify_logits, idx_images, run_tests, sample_images, torch,  # noqa
                    trained, vil, vil_cmd, write_pnm)

TOL = 1e-5


def batch(model, paths, crop_pct=None):
    return torch.stack([vil.read_image(p, model, crop_pct) for p in paths])


def test_logits_equal_vil_classify(T):
    imgs = sample_images(6)
    for arch in ("vil", "vim"):
        run = trained(arch)
        m = vil.load(run).eval()
        T.equal(f"{arch} family", m.family, arch)
        with torch.no_grad():
            got = m(batch(m, imgs))
        T.close(f"{arch} logits against vil classify", got, classify_logits(run, imgs), TOL)
        # another size: the position embedding interpolated by vil at load
        m20 = vil.load(run, img_size=20).eval()
        T.equal(f"{arch} at 20 px: its transform's size", m20.vil_transform["img_size"], 20)
        with torch.no_grad():
            got = m20(batch(m20, imgs))
        T.close(f"{arch} at 20 px against vil classify --img-size 20", got,
                classify_logits(run, imgs, "--img-size", "20"), TOL)
        # the EMA weights of the run folder
        me = vil.load(run, ema=True).eval()
        with torch.no_grad():
            got = me(batch(me, imgs))
        T.close(f"{arch} EMA against vil classify --ema", got, classify_logits(run, imgs, "--ema"), TOL)


def test_no_pos_embed(T):
    """a model `vil train` trained without a position embedding (pos_embed = none): vil.load
    reads it, its logits are vil classify's at its size and another, and it saves back"""
    imgs = sample_images(6)
    run = trained("vil", "pos_embed=none")
    m = vil.load(run).eval()
    T.equal("no pos_embed in the module", (m.pos_embed, "pos_embed" in m.state_dict()), (None, False))
    T.equal("config pos_embed", m.config["pos_embed"], "none")
    with_pos = vil.load(trained("vil"))
    n = sum(p.numel() for p in m.parameters())
    n_with = sum(p.numel() for p in with_pos.parameters())
    T.equal("L * D fewer parameters than with one", n_with - n, ((SIZE // 4) ** 2 + 1) * 32)
    with torch.no_grad():
        T.close("logits against vil classify", m(batch(m, imgs)), classify_logits(run, imgs), TOL)
        m20 = vil.load(run, img_size=20).eval()
        T.close("at 20 px against vil classify --img-size 20", m20(batch(m20, imgs)),
                classify_logits(run, imgs, "--img-size", "20"), TOL)
        m.set_img_size(20)
        T.close("set_img_size(20) in PyTorch: the same module at 20 px", m(batch(m, imgs)),
                classify_logits(run, imgs, "--img-size", "20"), TOL)
    p = os.path.join(TMP, "nopos.safetensors")
    vil.save(vil.load(run), p)
    T.ok("saved back: vil info reads it without a pos_embed", "no pos_embed" in vil_cmd("info", "--model", p).stdout)


def test_reference_scan_in_the_model(T):
    """the module on its plain PyTorch scan against the module on vil's ops"""
    imgs = sample_images(4)
    for arch in ("vil", "vim"):
        m = vil.load(trained(arch)).eval()
        x = batch(m, imgs)
        with torch.no_grad():
            a = m(x)
            m.use_vil_ops = False
            b = m(x)
        T.close(f"{arch} use_vil_ops False", b, a, TOL)
        T.ok(f"{arch} the flag is vil.load's", not vil.load(trained(arch), use_vil_ops=False).use_vil_ops)


def test_tensors_and_facts(T):
    """the state_dict is vil's table: names, order and shapes of vil_classifier_param_get_info;
    the parameter count vil's"""
    lib = vil._clib.lib()
    for arch in ("vil", "vim"):
        path = os.path.join(trained(arch), "last.safetensors")
        m = vil.load(path)
        ctx = vil._clib.cpu_context(1)
        h = ctypes.c_void_p()
        vil._clib.check(lib.vil_classifier_load(ctx.h, path.encode(), None, ctypes.byref(h)), "load")
        try:
            names, shapes = [], []
            for i in range(lib.vil_classifier_param_count(h)):
                pi = vil._clib.ParamInfo()
                lib.vil_classifier_param_get_info(h, i, ctypes.byref(pi))
                names.append(pi.name.decode())
                shapes.append(tuple(pi.shape[:pi.ndim]))
            info = vil._clib.ClassifierInfo()
            lib.vil_classifier_get_info(h, ctypes.byref(info))
        finally:
            lib.vil_classifier_free(h)
        sd = m.state_dict()
        T.equal(f"{arch} state_dict keys are vil's, in order", list(sd), names)
        T.equal(f"{arch} shapes", [tuple(v.shape) for v in sd.values()], shapes)
        T.equal(f"{arch} parameter count", sum(p.numel() for p in m.parameters()), info.n_params)
        T.equal(f"{arch} class token position", m.cls_pos, info.cls_pos)
        T.equal(f"{arch} step", m.vil_step, info.step)
        T.equal(f"{arch} class names (an IDX set: 0..3)", m.class_names, [str(i) for i in range(CLASSES)])
        fresh = vil.Classifier(m.config)
        T.equal(f"{arch} a Classifier built from the config has the same keys", list(fresh.state_dict()), names)


def test_pos_embed_resize(T):
    """set_img_size in PyTorch against vil's interpolation at load (vil_pos_embed_resize), up and
    down"""
    run = trained("vil")
    for s in (20, 28, 12):
        m = vil.load(run)
        m.set_img_size(s)
        want = vil.load(run, img_size=s).pos_embed
        T.close(f"{SIZE} -> {s} px", m.pos_embed, want, TOL)
        T.equal(f"{s} px: the transform follows", m.vil_transform["img_size"], s)
    m = vil.load(run)
    T.raises("a size the patches do not fit", ValueError, lambda: m.set_img_size(18), "multiple of the stride")


def test_read_image(T):
    """vil.read_image against the model-bound transform of libvil (vil_classifier_transform_file),
    with the model's crop and another; a colour image for a gray model"""
    lib = vil._clib.lib()
    run = trained("vil")
    path = os.path.join(run, "best.safetensors")
    m = vil.load(path)
    ctx = vil._clib.cpu_context(1)
    h = ctypes.c_void_p()
    vil._clib.check(lib.vil_classifier_load(ctx.h, path.encode(), None, ctypes.byref(h)), "load")
    g = torch.Generator().manual_seed(4)
    rgb = write_pnm(os.path.join(TMP, "rgb.ppm"), torch.randint(0, 256, (23, 37, 3), generator=g, dtype=torch.uint8))
    try:
        for img in (sample_images(1)[0], rgb):
            for crop in (None, 0.5):
                want = torch.empty(1, SIZE, SIZE)
                vil._clib.check(lib.vil_classifier_transform_file(h, img.encode(), crop or 0.0,
                                                                  ctypes.c_void_p(want.data_ptr())), "transform")
                got = vil.read_image(img, m, crop)
                T.ok(f"{os.path.basename(img)} crop {crop}: the same floats", torch.equal(got, want))
    finally:
        lib.vil_classifier_free(h)
    # a 16 x 16 gray image at crop 1 is only normalized: (x / 255 - mean) / std
    px, _ = idx_images()
    t = m.vil_transform
    got = vil.read_image(sample_images(1)[0], m)
    T.equal("crop_pct from the checkpoint (vil_fashion.cfg: 1)", t["crop_pct"], 1.0)
    T.close("normalization", got[0], (px[0].float() / 255 - t["mean"][0]) / t["std"][0], 1e-6)
    T.raises("a file that is not an image: vil's message", vil.VilError,
             lambda: vil.read_image(os.path.join(run, "config.cfg"), m))
    T.raises("a missing file", vil.VilError, lambda: vil.read_image(os.path.join(TMP, "nothing.png"), m), "nothing.png")
    T.raises("a transform dict without a size", (KeyError, TypeError), lambda: vil.read_image(rgb, {"channels": 3}))


def test_save_round_trip(T):
    imgs = sample_images(4)
    for arch in ("vil", "vim"):
        m = vil.load(trained(arch)).eval()
        m.class_names = ["shirt", "trouser", "bag", "boot"]
        m.vil_transform = dict(m.vil_transform, crop_pct=0.9)
        with torch.no_grad():
            want = m(batch(m, imgs))
        for ext in ("safetensors", "pth"):
            p = os.path.join(TMP, f"{arch}_saved.{ext}")
            vil.save(m, p, step=123)
            back = vil.load(p)
            T.ok(f"{arch} .{ext}: the same tensors",
                 all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), back.state_dict().values())))
            T.equal(f"{arch} .{ext}: config", back.config, m.config)
            T.equal(f"{arch} .{ext}: class names", back.class_names, m.class_names)
            T.equal(f"{arch} .{ext}: transform", back.vil_transform, m.vil_transform)
            T.equal(f"{arch} .{ext}: step", back.vil_step, 123)
            T.close(f"{arch} .{ext}: vil classify's logits", classify_logits(p, imgs), want, TOL)
            info = vil_cmd("info", "--model", p).stdout
            T.ok(f"{arch} .{ext}: vil info names the classes and the crop",
                 "4 (shirt, trouser, bag, boot)" in info and "crop_pct 0.9 (from the checkpoint)" in info)
        # the safetensors file: a standard layout (8-byte length, JSON padded to 8, data in order)
        raw = open(os.path.join(TMP, f"{arch}_saved.safetensors"), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        meta = head.pop("__metadata__")
        T.equal(f"{arch} header padded to 8", n % 8, 0)
        T.equal(f"{arch} tensors in the table's order", list(head), list(m.state_dict()))
        T.equal(f"{arch} data covers the file", max(v["data_offsets"][1] for v in head.values()), len(raw) - 8 - n)
        T.equal(f"{arch} metadata keys", sorted(meta),
                sorted(["format", "vil.config", "vil.img_size", "vil.step", "vil.class_names", "vil.eval"]))
        T.equal(f"{arch} vil.eval", json.loads(meta["vil.eval"]),
                {"crop_pct": 0.9, "resize": "bicubic", "mean": [0.449], "std": [0.226]})
    m = vil.load(trained("vil"))
    T.raises("another extension", ValueError, lambda: vil.save(m, os.path.join(TMP, "x.pt")), ".safetensors")
    m.class_names = ["a"]
    T.raises("class names that do not fit the head", ValueError, lambda: vil.save(m, os.path.join(TMP, "x.pth")))
    T.raises("not a Classifier", TypeError, lambda: vil.save(torch.nn.Linear(2, 2), os.path.join(TMP, "x.pth")))


def test_from_config(T):
    """a Classifier built from a config in PyTorch (vil's init), saved, read by vil classify"""
    torch.manual_seed(0)
    imgs = sample_images(3)
    for arch in ("vil", "vim"):
        m = vil.Classifier(arch=arch, img_size=SIZE, patch_size=4, stride=2, in_chans=1, embed_dim=24, depth=3,
                           d_state=8, num_classes=7).eval()
        T.equal(f"{arch} name (the papers' convention)", m.config["name"], f"{arch}_d24")
        T.equal(f"{arch} dt_rank resolved", m.config["dt_rank"], 2)
        p = os.path.join(TMP, f"cfg_{arch}.safetensors")
        vil.save(m, p)
        with torch.no_grad():
            want = m(batch(m, imgs))
        T.close(f"{arch} stride 2, N 8, 3 blocks: vil classify", classify_logits(p, imgs), want, TOL)
        if arch == "vim":
            T.ok("vim: A_log = log(1..N) (S4D-real)",
                 torch.allclose(m.layers[0].mixer.A_log[5], torch.log(torch.arange(1.0, 9.0))))
    T.raises("an unknown key", ValueError, lambda: vil.Classifier(embed_dims=3), "embed_dims")
    T.raises("an unknown arch", ValueError, lambda: vil.Classifier(arch="gru"), "gru")


def test_vim_pth(T):
    """the official ViM checkpoint format (tests/data/pth, torch.save of ViM's training state):
    logits against the float64 ones tests/reference/make_vim_pth.py computed, model and EMA"""
    d = os.path.join(REPO, "tests", "data", "pth")
    x = torch.frombuffer(bytearray(open(os.path.join(d, "inputs.f32"), "rb").read()), dtype=torch.float32)
    x = x.reshape(3, 3, 16, 16)
    for line in open(os.path.join(d, "cases.txt")):
        if line.startswith("#") or not line.strip():
            continue
        name = line.split()[0]
        for ema in (False, True):
            m = vil.load(os.path.join(d, name + ".pth"), ema=ema).eval()
            want = torch.frombuffer(bytearray(open(os.path.join(d, f"{name}.{'ema' if ema else 'model'}.f64"),
                                                   "rb").read()), dtype=torch.float64).reshape(3, -1)
            with torch.no_grad():
                T.close(f"{name}{' ema' if ema else ''} ({m.family}, stride {m.config['stride']})", m(x), want, TOL)
    m = vil.load(os.path.join(d, "vim_p4s4_state_dict.pth"))
    T.equal("a bare state dict: inferred as vim", m.family, "vim")
    # a bare safetensors state dict (no metadata: the architecture from the shapes)
    bare = os.path.join(TMP, "bare.safetensors")
    with open(bare, "wb") as f:
        f.write(vil.files.safetensors_bytes(vil.files._tensors(m), {}))
    back = vil.load(bare)
    T.ok("a bare safetensors state dict: the same tensors",
         all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), back.state_dict().values())))
    T.equal("a bare safetensors state dict: its size from the grid", back.config["img_size"], 16)


def test_train_mode_and_drop_path(T):
    m = vil.load(trained("vil"), drop_path=0.5)
    x = batch(m, sample_images(6))
    m.eval()
    with torch.no_grad():
        e1, e2 = m(x), m(x)
        m.train()
        torch.manual_seed(1)
        t1 = m(x)
        torch.manual_seed(2)
        t2 = m(x)
    T.ok("eval is deterministic", torch.equal(e1, e2))
    T.ok("train mode with drop path: samples differ between draws", not torch.equal(t1, t2))
    m.config["drop_path"] = 0.0
    with torch.no_grad():
        T.ok("drop_path 0: train equals eval", torch.equal(m(x), e1))
    f = m.forward_features(x)
    T.equal("forward_features: every token after the final norm", tuple(f.shape),
            (6, m.grid * m.grid + 1, m.config["embed_dim"]))
    with torch.no_grad():
        T.ok("forward_head(forward_features) is forward", torch.equal(m.forward_head(m.forward_features(x)), m(x)))


def test_autocast_cpu(T):
    """a bf16-autocast step on the CPU runs through vil's ops and gives finite gradients near the
    float32 ones"""
    m = vil.load(trained("vim"))
    x = batch(m, sample_images(6))
    y = torch.arange(6) % CLASSES
    loss32 = torch.nn.functional.cross_entropy(m(x), y)
    loss32.backward()
    g32 = m.layers[0].mixer.in_proj.weight.grad.clone()
    m.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(m(x), y)
    loss.backward()
    g = m.layers[0].mixer.in_proj.weight.grad
    T.ok("loss finite", torch.isfinite(loss).item(), f"{loss.item():.4f} (float32 {loss32.item():.4f})")
    T.close("in_proj's gradient near float32's", g, g32, 5e-2)


def test_dtypes(T):
    """the whole module in float64 (vil's ops convert to float32 and back) and in bfloat16"""
    m = vil.load(trained("vim")).eval()
    x = batch(m, sample_images(3))
    with torch.no_grad():
        want = m(x)
        T.close("float64 module", m.double()(x.double()), want, 1e-5)
        T.equal("float64 logits", m(x.double()).dtype, torch.float64)
        got = m.bfloat16()(x.bfloat16())
    T.equal("bfloat16 logits", got.dtype, torch.bfloat16)
    T.close("bfloat16 module", got, want, 5e-2)


def test_errors(T):
    T.raises("a file that is no model: vil's message", vil.VilError,
             lambda: vil.load(os.path.join(trained("vil"), "config.cfg")), "config.cfg")
    T.raises("a missing file", vil.VilError, lambda: vil.load(os.path.join(TMP, "missing.safetensors")), "missing")
    m = vil.load(trained("vil"))
    T.raises("images of another size", ValueError, lambda: m(torch.zeros(1, 1, 20, 20)), "set_img_size")


if __name__ == "__main__":
    sys.exit(run_tests(globals(), sys.argv[1:]))
