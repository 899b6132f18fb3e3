#!/usr/bin/python3
"""make_tfevents.py: TensorBoard's own writer and reader against vil's event files.

  python3 tests/reference/make_tfevents.py [OUT]      write tests/data/tfevents/reference.tfevents
  python3 tests/reference/make_tfevents.py --check PATH
  python3 tests/reference/make_tfevents.py --dump PATH

The first form writes SCALARS below with TensorBoard's EventFileWriter (the writer under
torch.utils.tensorboard.SummaryWriter and tensorboard.summary) and copies the file to OUT
(default tests/data/tfevents/reference.tfevents). tests/test_tfevents.c holds the same table:
it checks the file's contents with its own reader and that vil writes byte-identical records.

--check reads PATH (an event file or a folder of them; e.g. what `VIL_TFEVENTS_OUT=DIR
build/tests/test_tfevents` leaves in DIR, the same table written by vil) with TensorBoard's
LegacyEventFileLoader (the raw Events; its record reader verifies both CRCs of every record),
EventAccumulator, and plugin_event_accumulator's (what `tensorboard --load_fast=false` serves
the scalar dashboard from), and checks that it holds exactly SCALARS: the same tags, steps, wall
times and float32 values, after a first record of file_version "brain.Event:2". Prints
"N passed, N failed"; exits 1 on any failure.

--dump prints every scalar of PATH (any run, e.g. a `vil train` log folder) as TensorBoard's
EventAccumulator reads it: tag, step, wall time, value.

Needs the tensorboard package (pip install tensorboard; Debian has none). Without it, a source
tree works: the tensorflow/tensorboard repository with its .proto files compiled by protoc
(Debian: protobuf-compiler, python3-protobuf, python3-absl, python3-numpy):
  cd TB && find tensorboard -name '*.proto' | xargs protoc --python_out=.
  PYTHONPATH=TB python3 tests/reference/make_tfevents.py --check DIR
"""
import glob
import math
import os
import shutil
import struct
import sys
import tempfile

from tensorboard.backend.event_processing import (event_accumulator, event_file_loader,
                                                  plugin_event_accumulator)
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

LONG_TAG = "long/" + "x" * 145  # 150 bytes: 2-byte length varints in Value and Summary

# (tag, step, wall_time, value), in the order written; the comments say what each one covers
SCALARS = [
    ("train/loss", 0, 1700000000.25, 2.302585),  # step 0: proto3 leaves the field out
    ("train/loss", 1, 1700000001.5, 1.875),
    ("train/loss", 2, 1700000002.75, 0.0),  # simple_value 0 is still written (a oneof member)
    ("train/lr", 0, 1700000000.25, 0.1),  # not exact in float32: rounded as C's (float) cast
    ("train/lr", 300, 1700000003.0, 1e-05),  # a 2-byte step varint
    ("eval/top1", 1 << 40, 1700000004.125, 76.5),  # a 6-byte step varint
    ("eval/top1", -3, 1700000005.0, -1.5),  # a negative step: a 10-byte varint
    ("grad/gr\u00f6\u00dfe", 7, 0.0, math.inf),  # a UTF-8 tag; wall_time 0 left out
    ("grad/nan", 8, 1700000006.5, math.nan),
    (LONG_TAG, 9, 1700000007.0, 3.0e38),
]


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def write(out):
    d = tempfile.mkdtemp()
    try:
        w = EventFileWriter(d)
        for tag, step, wall, value in SCALARS:
            v = summary_pb2.Summary.Value(tag=tag, simple_value=value)
            w.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[v])))
        w.close()
        (path,) = glob.glob(os.path.join(d, "*tfevents*"))
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        shutil.copyfile(path, out)
        print("wrote %s (%d bytes, %d scalars) from %s" % (out, os.path.getsize(out), len(SCALARS),
                                                           os.path.basename(path)))
    finally:
        shutil.rmtree(d)


def check(path):
    passed = failed = 0

    def t(ok, msg):
        nonlocal passed, failed
        passed += bool(ok)
        failed += not ok
        print("%s %s" % ("ok  " if ok else "FAIL", msg))

    files = sorted(glob.glob(os.path.join(path, "*tfevents*"))) if os.path.isdir(path) else [path]
    t(len(files) == 1, "one event file in %s (%d)" % (path, len(files)))
    if len(files) != 1:
        print("%d passed, %d failed" % (passed, failed))
        return 1
    # the raw events: every record read (a CRC error raises), the file_version record first
    try:
        events = list(event_file_loader.LegacyEventFileLoader(files[0]).Load())
    except Exception as e:  # DataLossError from the CRC checks
        events = []
        t(False, "EventFileLoader reads %s: %s" % (files[0], e))
    t(len(events) == len(SCALARS) + 1, "%d records, %d expected" % (len(events), len(SCALARS) + 1))
    if events:
        t(events[0].file_version == "brain.Event:2", "first record file_version %r" % events[0].file_version)
    for e, (tag, step, wall, value) in zip(events[1:], SCALARS):
        vals = e.summary.value
        ok = (len(vals) == 1 and vals[0].tag == tag and vals[0].WhichOneof("value") == "simple_value"
              and e.step == step and e.wall_time == wall and same(vals[0].simple_value, f32(value)))
        t(ok, "record %s step %d wall %.3f value %r" % (tag[:24], step, wall, value))
    # what TensorBoard's scalar dashboard gets (0: keep every scalar, no reservoir sampling)
    acc = event_accumulator.EventAccumulator(files[0], size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = []
    for tag, _, _, _ in SCALARS:
        if tag not in tags:
            tags.append(tag)
    t(sorted(acc.Tags()["scalars"]) == sorted(tags),
      "EventAccumulator: %d scalar tags" % len(acc.Tags()["scalars"]))
    for tag in tags:
        want = [(s, w, f32(v)) for g, s, w, v in SCALARS if g == tag]
        got = [(e.step, e.wall_time, e.value)
               for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []
        ok = len(got) == len(want) and all(a[0] == b[0] and a[1] == b[1] and same(a[2], b[2])
                                           for a, b in zip(got, want))
        t(ok, "EventAccumulator %s: %s" % (tag[:24], got))
    # the loader of `tensorboard --load_fast=false`: scalars migrated to scalar-plugin tensors
    acc = plugin_event_accumulator.EventAccumulator(files[0], size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    t(sorted(acc.Tags()["tensors"]) == sorted(tags), "plugin EventAccumulator tensor tags")
    for tag in tags:
        want = [(s, w, f32(v)) for g, s, w, v in SCALARS if g == tag]
        meta = acc.SummaryMetadata(tag) if tag in acc.Tags()["tensors"] else None
        got = [(e.step, e.wall_time, float(tensor_util.make_ndarray(e.tensor_proto)))
               for e in acc.Tensors(tag)] if meta else []
        ok = (meta is not None and meta.plugin_data.plugin_name == "scalars" and len(got) == len(want)
              and all(a[0] == b[0] and a[1] == b[1] and same(a[2], b[2]) for a, b in zip(got, want)))
        t(ok, "plugin EventAccumulator %s (scalars plugin): %s" % (tag[:24], got))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def dump(path):
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    n = 0
    for tag in sorted(acc.Tags()["scalars"]):
        for e in acc.Scalars(tag):
            print("%s\t%d\t%.6f\t%r" % (tag, e.step, e.wall_time, e.value))
            n += 1
    print("%d scalars, %d tags" % (n, len(acc.Tags()["scalars"])), file=sys.stderr)
    return 0 if n else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        sys.exit(dump(sys.argv[2]))
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        sys.exit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    write(sys.argv[1] if len(sys.argv) == 2 else os.path.normpath(
          os.path.join(here, "..", "data", "tfevents", "reference.tfevents")))
