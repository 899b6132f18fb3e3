"""test_finetune.py: the round trip of the issue: a vil-trained checkpoint (`vil train`, ViL and
ViM) loaded into PyTorch, given a new head of another class count and another image size,
fine-tuned 20 steps with torch.optim.AdamW on vil's ops (the loss falls), saved with vil.save,
and read back by vil: `vil classify`'s logits and `vil eval`'s loss, top-1 and per-image
probabilities equal the module's (vil eval wants the data's 4 classes: a new 4-class head; a
6-class head is read back by vil classify). Run: /usr/bin/python3 python/tests/test_finetune.py"""
import json
import os
import sys

from common import CLASSES, TMP, classify_logits, idx_images, run_tests, torch, trained, vil, vil_cmd, write_pnm
import common

NEW_SIZE, STEPS = 20, 20


def train_images():
    px, lab = idx_images("train")
    d = os.path.join(TMP, "train_pgm")
    os.makedirs(d, exist_ok=True)
    return [write_pnm(os.path.join(d, f"t{i}.pgm"), px[i]) for i in range(px.shape[0])], lab


def test_finetune_round_trip(T):
    paths, labels = train_images()
    val_px, val_lab = idx_images("t10k")
    val_paths = common.sample_images(val_px.shape[0])
    for arch, classes in (("vil", CLASSES), ("vim", CLASSES), ("vil", 6)):
        name = f"{arch} {classes} classes"
        torch.manual_seed(0)
        m = vil.load(trained(arch), drop_path=0.1)
        m.reset_classifier(classes, [f"c{i}" for i in range(classes)])
        m.set_img_size(NEW_SIZE)
        x = torch.stack([vil.read_image(p, m) for p in paths])
        T.equal(f"{name} inputs at the new size", tuple(x.shape[-2:]), (NEW_SIZE, NEW_SIZE))
        opt = torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=0.05)
        lossf = torch.nn.functional.cross_entropy
        m.eval()
        with torch.no_grad():
            before = lossf(m(x), labels).item()
        m.train()
        for step in range(STEPS):
            idx = torch.randperm(x.shape[0])[:16]
            loss = lossf(m(x[idx]), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        m.eval()
        with torch.no_grad():
            after = lossf(m(x), labels).item()
        T.ok(f"{name} the loss falls in {STEPS} steps", after < 0.8 * before, f"{before:.4f} -> {after:.4f}")

        out = os.path.join(TMP, f"tuned_{arch}_{classes}.safetensors")
        vil.save(m, out)
        xv = torch.stack([vil.read_image(p, m) for p in val_paths])
        with torch.no_grad():
            logits = m(xv).double()
        T.close(f"{name} vil classify reads the fine-tuned model: the same logits", classify_logits(out, val_paths),
                logits, 1e-5)
        if classes != CLASSES:
            continue
        # vil eval on the IDX test split (the same pixels as the PGM files)
        res, pred = os.path.join(TMP, f"eval_{arch}.json"), os.path.join(TMP, f"pred_{arch}.jsonl")
        vil_cmd("eval", "--model", out, "--data", common.idx_set(), "--split", "test", "--device", "cpu",
                "--results-file", res, "--predictions-file", pred, "--topk", "3")
        r = json.load(open(res))
        loss = lossf(logits, val_lab).item()
        top1 = 100.0 * (logits.argmax(1) == val_lab).double().mean().item()
        T.ok(f"{name} vil eval's loss", abs(r["loss"] - loss) <= 2e-6 + 1e-5 * abs(loss), f"{r['loss']} and {loss:.6f}")
        T.ok(f"{name} vil eval's top-1", abs(r["top1"] - top1) < 1e-3, f"{r['top1']} and {top1}")
        T.equal(f"{name} vil eval's size", r["img_size"], NEW_SIZE)
        rows = [json.loads(line) for line in open(pred)]
        prob = torch.softmax(logits, 1)
        worst = max(abs(k["prob"] - prob[i, k["index"]].item()) for i, row in enumerate(rows) for k in row["topk"])
        T.ok(f"{name} vil eval's per-image top-3 probabilities", len(rows) == len(val_paths) and worst < 1e-6,
             f"{len(rows)} rows, worst difference {worst:.2e}")
        T.equal(f"{name} the new class names", rows[0]["topk"][0]["name"][0], "c")
        back = vil.load(out)
        T.equal(f"{name} vil.load reads it back: classes, size", (back.num_classes, back.config["img_size"]),
                (classes, NEW_SIZE))


if __name__ == "__main__":
    sys.exit(run_tests(globals(), sys.argv[1:]))
