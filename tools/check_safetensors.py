#!/usr/bin/env python3
"""check_safetensors.py: cross-check vil's safetensors files against the official Python
library (needs python3 with torch and safetensors, e.g. on the GPU machine; not a dependency
of vil). Exits non-zero when any file fails to load or differs from what was expected.

  VIL_ST_KEEP=DIR build/tests/test_safetensors        # keep the files the C test writes
  python3 tools/check_safetensors.py DIR/*.safetensors  # load each; roundtrip.* is checked value by value
  python3 tools/check_safetensors.py --exact DIR        # DIR/exact.safetensors == save_file's bytes
  python3 tools/check_safetensors.py --write F          # write F with save_file for the C reader:
  build/tests/test_safetensors F                        #   it prints the same names, shapes and sums
"""
import argparse
import os
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

# What tests/test_safetensors.c writes into roundtrip.safetensors.
ROUNDTRIP = {
    "u8": torch.tensor([1, 2, 3, 4, 255], dtype=torch.uint8),
    "half": torch.tensor([1.0, -2.0, 65504.0, 2.0**-24, float("inf")], dtype=torch.float16),
    "weight": torch.tensor([[1.5, -2.0, 0.0], [3.25, 1e-3, -7.0]], dtype=torch.float32),
    "brain": torch.tensor([[1.0, -3.0], [0.0, 10.0]], dtype=torch.bfloat16),
    "double": torch.tensor([0.1, -1e10, 2.5], dtype=torch.float64),
    "long": torch.tensor([-5, 2**63 - 1], dtype=torch.int64),
    "scalar": torch.tensor(42, dtype=torch.int32),
    "empty": torch.zeros((0, 4), dtype=torch.float32),
}
ROUNDTRIP_META = {
    "format": "pt",
    "vil.config": '{"model": "vil_tiny", "note": "tab\\tquote\\" üñí\n"}',
    "epoch": "2",
}


def describe(path):
    tensors = load_file(path)
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        names = list(f.keys())
    print(f"{path}: {len(tensors)} tensors")
    for k in sorted(meta):
        print(f"  meta {k} = {meta[k]}")
    for name in names:
        t = tensors[name]
        line = f"  {name:<24} {str(t.dtype):<15} {list(t.shape)}"
        if t.is_floating_point() and t.numel():
            line += f" sum {t.double().sum().item():.6g} first {t.flatten()[0].item():.6g}"
        print(line)
    return tensors, meta


def check_roundtrip(tensors, meta):
    bad = []
    if set(tensors) != set(ROUNDTRIP):
        bad.append(f"names {sorted(tensors)} != {sorted(ROUNDTRIP)}")
    for name, want in ROUNDTRIP.items():
        got = tensors.get(name)
        if got is None:
            continue
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            bad.append(f"{name}: got {got.dtype} {list(got.shape)} {got}, want {want.dtype} {want}")
    if meta != ROUNDTRIP_META:
        bad.append(f"metadata {meta!r} != {ROUNDTRIP_META!r}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--exact", metavar="DIR", help="compare DIR/exact.safetensors with save_file's bytes")
    ap.add_argument("--write", metavar="FILE", help="write a mixed-dtype file with save_file")
    args = ap.parse_args()
    failures = 0

    for path in args.files:
        try:
            tensors, meta = describe(path)
        except Exception as e:  # report every file, not just the first bad one
            print(f"FAIL {path}: the official loader refused it: {e}")
            failures += 1
            continue
        if os.path.basename(path) == "roundtrip.safetensors":
            problems = check_roundtrip(tensors, meta)
            for p in problems:
                print(f"FAIL {path}: {p}")
            failures += bool(problems)
            if not problems:
                print(f"ok   {path}: every value and metadata entry as written")

    if args.exact:
        ours = os.path.join(args.exact, "exact.safetensors")
        with tempfile.TemporaryDirectory() as d:
            ref = os.path.join(d, "ref.safetensors")
            save_file({"w": torch.tensor([1.0, -2.0])}, ref, metadata={"format": "pt"})
            a, b = open(ours, "rb").read(), open(ref, "rb").read()
        if a == b:
            print(f"ok   {ours} is byte-identical to save_file's output ({len(a)} bytes)")
        else:
            print(f"FAIL {ours} differs from save_file's output:\n  ours {a!r}\n  ref  {b!r}")
            failures += 1

    if args.write:
        t = {
            "layers.0.mixer.in_proj.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4) / 4,
            "layers.0.norm.weight": torch.tensor([0.5, -1.5, 2.0], dtype=torch.float16),
            "pos_embed": torch.tensor([[[1.0, 2.0, 3.0]]], dtype=torch.bfloat16),
            "step": torch.tensor([7], dtype=torch.int64),
            "scale": torch.tensor(0.25, dtype=torch.float64),
        }
        save_file(t, args.write, metadata={"format": "pt", "source": "safetensors.torch.save_file"})
        print(f"wrote {args.write}; the C reader should print:")
        describe(args.write)

    print(f"{'ok' if failures == 0 else 'FAIL'}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
