#!/usr/bin/env python3
"""pth_seeds.py: writes the .pth reproducers of issue 30 item 1 beside itself (torch not needed:
the pickle is written by hand as torch.save writes it, the archive stored). Each is a few hundred
bytes; tests/fuzz.mk copies them into the fuzz_pth and fuzz_checkpoint corpora.
  claim_2p29.pth  a storage that declares 2^29 floats over a 4-byte entry, viewed whole
  claim_2p31.pth  the same with 2^31 floats
  broadcast.pth   a view of 2^29 elements with stride 0 over a storage of one float"""
import os
import struct
import zipfile


def ustr(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def intv(v):
    if 0 <= v < 256:
        return b"K" + bytes([v])
    if 0 <= v < 2**31:
        return b"J" + struct.pack("<i", v)
    return b"\x8a\x08" + struct.pack("<q", v)


def glob(mod, name):
    return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"


def pickle(numel, size, stride):
    od = glob("collections", "OrderedDict") + b")R"
    t = (ustr("w") + glob("torch._utils", "_rebuild_tensor_v2") + b"((" + ustr("storage") +
         glob("torch", "FloatStorage") + ustr("0") + ustr("cpu") + intv(numel) + b"tQ" +
         intv(0) + b"(" + intv(size) + b"t(" + intv(stride) + b"t\x89" + od + b"tR")
    return b"\x80\x02}" + ustr("model") + od + b"(" + t + b"us."


def write(name, numel, size, stride):
    here = os.path.dirname(os.path.abspath(__file__))
    with zipfile.ZipFile(os.path.join(here, name), "w", zipfile.ZIP_STORED) as z:
        for n, data in (("archive/data.pkl", pickle(numel, size, stride)),
                        ("archive/data/0", b"\0\0\0\0")):
            zi = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            z.writestr(zi, data)


write("claim_2p29.pth", 2**29, 2**29, 1)
write("claim_2p31.pth", 2**31, 2**31, 1)
write("broadcast.pth", 1, 2**29, 0)
