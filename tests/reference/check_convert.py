#!/usr/bin/python3
"""check_convert.py: `vil convert`'s output against the .pth it came from, read by PyTorch.

  python3 tests/reference/check_convert.py IN.pth OUT.safetensors [--ema]

torch.load reads IN.pth (the original, not vil's reader); OUT.safetensors is read with
safetensors.torch.load_file where the safetensors package is installed (the GPU machine), else
with a minimal reader of the format (Debian has no python3-safetensors). The converted file must
hold exactly the state dict's tensors, same names in the same order, bit for bit, plus vil's
metadata. Prints "N passed, N failed"; exits 1 on any failure."""
import json
import struct
import sys

import torch

try:
    from safetensors import safe_open
    from safetensors.torch import load_file
    READER = "safetensors.torch.load_file"

    def read(path):
        with safe_open(path, "pt") as f:
            meta, order = f.metadata(), list(f.keys())
        return load_file(path), meta, order
except ImportError:
    READER = "a minimal safetensors reader (no safetensors package here)"
    DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}

    def read(path):
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        buf = raw[8 + n:]
        meta = head.pop("__metadata__", {})
        out = {}
        for k, v in head.items():
            a, b = v["data_offsets"]
            out[k] = torch.frombuffer(bytearray(buf[a:b]), dtype=DT[v["dtype"]]).reshape(v["shape"])
        # safe_open lists keys sorted; the header keeps the writer's order
        return out, meta, list(head.keys())


def main():
    pth, st, ema = sys.argv[1], sys.argv[2], "--ema" in sys.argv[3:]
    try:
        ck = torch.load(pth, map_location="cpu", weights_only=False)
    except TypeError:  # torch before 1.13 has no weights_only
        ck = torch.load(pth, map_location="cpu")
    sd = ck["model_ema" if ema else "model"] if "model" in ck else ck
    got, meta, order = read(st)
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        passed += bool(ok)
        failed += not ok
        print(("ok   " if ok else "FAIL ") + what)

    check(sorted(got) == sorted(sd), f"{st}: the same {len(sd)} tensor names ({READER})")
    if READER.startswith("a minimal"):
        check(order == list(sd.keys()), "the same order as the state dict")
    same = all(k in got and got[k].dtype == v.dtype and torch.equal(got[k], v) for k, v in sd.items())
    check(same, "every tensor bit for bit")
    cfg = json.loads(meta.get("vil.config", "{}"))
    check(meta.get("format") == "pt" and cfg.get("arch") in ("vil", "vim") and "vil.img_size" in meta,
          f"vil metadata: format {meta.get('format')}, arch {cfg.get('arch')}, img_size {meta.get('vil.img_size')}")
    check(("model_ema" if ema else "model") in meta.get("vil.source", ""), f"source {meta.get('vil.source')}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
