#!/usr/bin/python3
"""check_pth_write.py: a .pth that `vil convert` wrote, read by PyTorch.

  python3 tests/reference/check_pth_write.py SRC.pth OUT.pth OUT.safetensors [--ema]

SRC.pth is a checkpoint in the official ViM layout (tests/reference/make_vim_pth.py), OUT.pth and
OUT.safetensors what vil convert made of it (or of each other). torch.load(OUT.pth,
weights_only=True) must read it as {'model': OrderedDict, 'vil_metadata': dict of str}; the state
dict must hold SRC's state dict (model, or model_ema with --ema): the official names in the
official order, same dtypes and shapes, bit for bit, and load with strict=True into the module
layout make_vim_pth.py saves; its tensors must equal OUT.safetensors' (read as check_convert.py
reads it) and vil_metadata must be OUT.safetensors' metadata without its "format" key. The
archive: entries under archive/ (data.pkl, byteorder, data/0..N-1, version "3"), stored, each
entry's data 64-byte aligned as torch.save lays it out; data.pkl byte for byte what torch.save
itself writes for the object it loaded, when its pickler keeps no memo. Prints "N passed,
N failed"; exits 1 on any failure."""
import collections
import io
import json
import os
import pickle
import struct
import sys
import types
import zipfile

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_convert import read as read_safetensors  # noqa: E402
import make_vim_pth  # noqa: E402  the official module layout


class FastPickler(pickle._Pickler):
    """Python's pickler without a memo (pickle.Pickler.fast): torch.save through it writes the
    opcodes vil's writer does"""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.fast = True


FAST = types.ModuleType("fastpickle")
FAST.Pickler = FastPickler


def main():
    src, out, st, ema = sys.argv[1], sys.argv[2], sys.argv[3], "--ema" in sys.argv[4:]
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        passed += bool(ok)
        failed += not ok
        print(("ok   " if ok else "FAIL ") + what)

    orig = torch.load(src, map_location="cpu", weights_only=False)
    want = orig["model_ema" if ema else "model"]
    try:
        ck = torch.load(out, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001  what torch says is the finding
        check(False, f"torch {torch.__version__} torch.load({out}, weights_only=True): {str(e)[:300]}")
        print(f"{passed} passed, {failed} failed")
        sys.exit(1)
    check(True, f"torch {torch.__version__} reads {out} with weights_only=True")
    check(type(ck) is dict and list(ck) == ["model", "vil_metadata"],
          f"a dict of 'model' and 'vil_metadata' ({type(ck).__name__}: {list(ck)[:5]})")
    sd, meta = ck.get("model"), ck.get("vil_metadata")
    check(type(sd) is collections.OrderedDict, "model is an OrderedDict, as state_dict() gives")
    check(list(sd) == list(want), f"the official {len(want)} key names in the official order")
    check(all(k in sd and sd[k].dtype == v.dtype and sd[k].shape == v.shape and torch.equal(sd[k], v)
              for k, v in want.items()), "every tensor as in the source, bit for bit")
    cfg = json.loads((meta or {}).get("vil.config", "{}"))
    try:
        net = make_vim_pth.VisionMamba(cfg["patch_size"], cfg["stride"], cfg["embed_dim"], cfg["depth"],
                                       cfg["d_state"], cfg["arch"] == "vim", img=cfg["img_size"],
                                       classes=cfg["num_classes"])
        net.load_state_dict(sd, strict=True)
        check(list(net.state_dict()) == list(sd), "loads with strict=True into the official module layout")
    except Exception as e:  # noqa: BLE001
        check(False, f"load_state_dict into the official module layout: {str(e)[:300]}")

    got, st_meta, order = read_safetensors(st)
    check(order == list(sd) and all(torch.equal(got[k], sd[k]) for k in sd),
          f"the same tensors, names and order as {os.path.basename(st)}")
    plain = {k: v for k, v in st_meta.items() if k != "format"}
    check(type(meta) is dict and all(type(k) is str and type(v) is str for k, v in meta.items()),
          "vil_metadata is a dict of str")
    same = {k: v for k, v in meta.items() if k != "vil.source"} == {k: v for k, v in plain.items() if k != "vil.source"}
    check(same and "vil.source" in meta, f"vil_metadata holds {os.path.basename(st)}'s metadata: {sorted(meta)}")

    raw = open(out, "rb").read()
    z = zipfile.ZipFile(out)
    names = z.namelist()
    n = len(sd)
    check(names == ["archive/data.pkl", "archive/byteorder"] + [f"archive/data/{i}" for i in range(n)] +
          ["archive/version"], f"entries archive/data.pkl, byteorder, data/0..{n - 1}, version")
    check(z.read("archive/version") == b"3\n" and z.read("archive/byteorder") == b"little", "version 3, little-endian")
    check(all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist()), "every entry stored")
    # the local header: 30 bytes, then the name and the extra field whose lengths it gives
    at = [i.header_offset + 30 + sum(struct.unpack("<HH", raw[i.header_offset + 26:i.header_offset + 30]))
          for i in z.infolist()]
    check(all(a % 64 == 0 for a in at), f"each entry's data 64-byte aligned (offsets mod 64: {sorted(set(a % 64 for a in at))})")
    buf = io.BytesIO()
    torch.save(ck, buf, pickle_module=FAST, pickle_protocol=2)
    ref = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    ref_pkl = ref.read(next(x for x in ref.namelist() if x.endswith("/data.pkl")))
    check(z.read("archive/data.pkl") == ref_pkl,
          f"data.pkl byte for byte as torch.save writes it without a memo ({len(ref_pkl)} bytes)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
