"""common.py: what the package's tests share: the checks and their closing line, paths to vil's
build, the small data sets and runs they make once (a synthetic IDX set, `vil train` runs of ViL
and ViM on it, images as PGM files), and vil's commands."""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))

import torch  # noqa: E402

import vil  # noqa: E402

__all__ = ["Checks", "REPO", "TMP", "SIZE", "CLASSES", "VIL_BIN", "rel", "run_tests", "vil_cmd", "classify_logits",
           "idx_set", "idx_images", "write_pnm", "sample_images", "trained", "torch", "vil"]
VIL_BIN = os.environ.get("VIL_BIN") or os.path.join(REPO, "bin", "vil")


def rel(a, b):
    """relative L2 error of a against b (the repository's measure)"""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


class Checks:
    """named checks; each prints one line, the run closes with "N passed, N failed" """

    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.prefix = ""

    def ok(self, name, cond, detail=""):
        cond = bool(cond)
        self.passed += cond
        self.failed += not cond
        detail = " | ".join(line.strip() for line in str(detail).splitlines() if line.strip())
        print(f"{'ok  ' if cond else 'FAIL'} {self.prefix}{name}{(': ' + detail) if detail else ''}", flush=True)
        return cond

    def close(self, name, got, want, tol):
        """rel(got, want) <= tol"""
        e = rel(got, want)
        return self.ok(name, e <= tol, f"rel err {e:.3e} (tol {tol:.0e})")

    def equal(self, name, got, want):
        return self.ok(name, got == want, "" if got == want else f"got {got!r}, want {want!r}")

    def raises(self, name, exc, fn, match=""):
        try:
            fn()
        except exc as e:
            return self.ok(name, match in str(e), f"{type(e).__name__}: {str(e)[:160]}")
        except Exception as e:  # noqa: BLE001
            return self.ok(name, False, f"raised {type(e).__name__}: {e}, not {exc.__name__}")
        return self.ok(name, False, f"no {exc.__name__} raised")

    def skip(self, name, why):
        self.skipped += 1
        print(f"skip {self.prefix}{name}: {why}", flush=True)


def run_tests(module_globals, argv):
    """runs the test_* functions of a module (those named in argv, or all), each with a Checks;
    an exception fails its test. Returns the exit status and prints the closing line."""
    T = Checks()
    names = [n for n in module_globals if n.startswith("test_") and callable(module_globals[n])]
    want = [a for a in argv if not a.startswith("-")]
    for n in names:
        if want and not any(w in n for w in want):
            continue
        T.prefix = n[5:] + ": "
        try:
            module_globals[n](T)
        except Exception:  # noqa: BLE001
            T.failed += 1
            print(f"FAIL {n}: raised\n{traceback.format_exc()}", flush=True)
    T.prefix = ""
    print(f"{T.passed} passed, {T.failed} failed" + (f" ({T.skipped} skipped)" if T.skipped else ""))
    return 1 if T.failed else 0


# ---- vil's commands ----
def vil_cmd(*args, check=True):
    p = subprocess.run([VIL_BIN, *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"vil {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return p


def classify_logits(model_path, images, *extra):
    """`vil classify --json` logits of each image, (n, classes) float64"""
    p = vil_cmd("classify", "--device", "cpu", "--json", "--model", model_path, *extra, *images)
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    by_file = {r["file"]: r["logits"] for r in rows}
    return torch.tensor([by_file[f] for f in images], dtype=torch.float64)


# ---- data ----
_tmp = tempfile.TemporaryDirectory(prefix="vil_python_tests_")
TMP = _tmp.name
_cache = {}

SIZE, CLASSES = 16, 4


def _pattern(c, rng):
    """a 16 x 16 gray image of class c: a brightness and a checkerboard phase per class, noise"""
    return bytes(max(0, min(255, 40 + 50 * c + (60 if (x // 4 + y // 4 + c) % 2 else 0) + rng.randint(-30, 30)))
                 for y in range(SIZE) for x in range(SIZE))


def idx_set():
    """a small IDX data set (train: 64 images, t10k: 16) of 4 learnable classes: its folder"""
    if "idx" in _cache:
        return _cache["idx"]
    d = os.path.join(TMP, "idx")
    os.makedirs(d)
    for prefix, n, seed in (("train", 64, 1), ("t10k", 16, 2)):
        rng = random.Random(seed)
        imgs = [_pattern(i % CLASSES, rng) for i in range(n)]
        with open(os.path.join(d, f"{prefix}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, SIZE, SIZE) + b"".join(imgs))
        with open(os.path.join(d, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + bytes(i % CLASSES for i in range(n)))
    _cache["idx"] = d
    return d


def idx_images(split="t10k"):
    """(pixels (n, 16, 16) uint8, labels (n,)) of the IDX set"""
    d = idx_set()
    raw = open(os.path.join(d, f"{split}-images-idx3-ubyte"), "rb").read()
    n = struct.unpack(">I", raw[4:8])[0]
    px = torch.tensor(list(raw[16:]), dtype=torch.uint8).reshape(n, SIZE, SIZE)
    lab = torch.tensor(list(open(os.path.join(d, f"{split}-labels-idx1-ubyte"), "rb").read()[8:]))
    return px, lab


def write_pnm(path, px):
    """px (H, W) uint8 as a PGM, (H, W, 3) as a PPM"""
    h, w = px.shape[:2]
    magic = b"P5" if px.dim() == 2 else b"P6"
    with open(path, "wb") as f:
        f.write(magic + f" {w} {h} 255\n".encode() + bytes(px.flatten().tolist()))
    return path


def sample_images(n=6):
    """the first n t10k images as PGM files: their paths"""
    if "pgm" not in _cache:
        px, _ = idx_images()
        d = os.path.join(TMP, "pgm")
        os.makedirs(d)
        _cache["pgm"] = [write_pnm(os.path.join(d, f"img{i}.pgm"), px[i]) for i in range(px.shape[0])]
    return _cache["pgm"][:n]


def trained(arch, *sets):
    """a `vil train` run folder: a small ViL or ViM (D 32, depth 2, 16 px, patches 4, 4 classes)
    trained 8 steps on the IDX set; sets: more model keys (key=value)"""
    key = "_".join(("run", arch) + sets).replace("=", "_")
    if key not in _cache:
        out = os.path.join(TMP, key)
        vil_cmd("train", "--config", os.path.join(REPO, "configs", "vil_fashion.cfg"), "--data", idx_set(),
                "--out", out, "--device", "cpu", "--threads", "2", "--progress", "plain", "--set", f"arch={arch}",
                "--set", "embed_dim=32", "--set", "depth=2", "--set", f"img_size={SIZE}", "--set",
                f"num_classes={CLASSES}", "--set", "batch=16", "--set", "epochs=2", "--set", "warmup_epochs=0",
                "--set", "reprob=0", "--set", "hflip=0", *(x for kv in sets for x in ("--set", kv)))
        _cache[key] = out
    return _cache[key]
