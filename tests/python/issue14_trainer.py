# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""A trainer process for the issue-14 regression tests (test_issue14.py): one way of holding,
closing or writing batches per MODE. Talks to the test over JSON lines on stdout; where the
test must order steps across processes it waits for a line on stdin (no sleeps).

usage: issue14_trainer.py MODE ADDRESS H5 JSON_ARGS
  MODE  keep_one | finish_and_hold | verify | close_with_live | write_in_place | writable
  JSON_ARGS  {"batch_size":..,"epochs":..,"buffer_depth":..,"variant":..,"limit":..}
"""
import gc
import hashlib
import json
import resource
import sys

import h5py
import numpy as np
import torch

import batchcast


def say(**kw):
    print(json.dumps(kw), flush=True)


def wait_for(word):
    line = sys.stdin.readline()
    if line.strip() != word:
        say(error=f"expected '{word}' on stdin, got {line!r}")
        sys.exit(3)


def checksum(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update((t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)).tobytes())
    return h.hexdigest()


class Reference:
    """The HDF5 file the stream comes from: checks a batch against it by sample id."""

    def __init__(self, path, limit):
        with h5py.File(path, "r") as f:
            n = limit or len(f["labels"])
            self.images = f["images"][:n].reshape(n, -1)
            self.labels = f["labels"][:n]

    def bad(self, images, labels, ids):
        ids = np.asarray(ids)
        got = np.asarray(images).reshape(len(ids), -1)
        bad_pixels = int((got != self.images[ids]).any(axis=1).sum())
        bad_labels = int((np.asarray(labels) != self.labels[ids]).sum())
        return bad_pixels, bad_labels


def consumer(address, a, **kw):
    return batchcast.Consumer(address, batch_size=a["batch_size"], epochs=a.get("epochs"),
                              buffer_depth=a.get("buffer_depth", 2), **kw)


def keep_one(address, a):
    """Case 1: keep one batch (a fixed batch to plot) and go on iterating all epochs. With
    variant "peek" it is next(iter(loader)) (a private copy, issue 16), otherwise the second
    batch of the for loop (a shared view that holds its slot; the first of every iter() is a
    private copy)."""
    loader = consumer(address, a)
    fixed = next(iter(loader)) if a.get("variant") == "peek" else None
    at_receipt = checksum(*fixed) if fixed else None
    batches = 0
    try:
        for _ in range(a["epochs"]):
            for images, labels in loader:  # noqa: B007
                batches += 1
                if fixed is None and batches == 2:
                    fixed = (images, labels)
                    at_receipt = checksum(images, labels)
    except batchcast.FailedPreconditionError as e:
        say(refused=str(e), batches=batches)
        return
    say(batches=batches, len=len(loader), fixed_unchanged=checksum(*fixed) == at_receipt)


def finish_and_hold(address, a):
    """Case 2: finish the epochs, keep the loop variable, stay alive until told to go."""
    loader = consumer(address, a)
    batches = 0
    for _ in range(a["epochs"]):
        for images, labels in loader:  # noqa: B007 - the loop variable is what stays held
            batches += 1
    at_end = checksum(images, labels)
    say(finished=True, batches=batches)
    wait_for("exit")
    say(unchanged=checksum(images, labels) == at_end)


def verify(address, a, ref):
    """Every batch of every epoch checked against the file; optionally waits for 'go'."""
    loader = consumer(address, a, with_info=True)
    say(attached=True)
    if a.get("wait_for_go"):
        wait_for("go")
    result = {"epochs": [], "len": len(loader)}
    for _ in range(a["epochs"]):
        batches = bad_pixels = bad_labels = 0
        for images, labels, info in loader:
            p, lab = ref.bad(images.numpy(), labels.numpy(), info.sample_ids.numpy())
            bad_pixels += p
            bad_labels += lab
            batches += 1
        result["epochs"].append({"batches": batches, "bad_pixels": bad_pixels,
                                 "bad_labels": bad_labels})
    say(**result)


def close_with_live(address, a, ref):
    """Case 3: take buffer_depth batches, close / del / with, keep the tensors until told."""
    variant = a["variant"]
    kw = {"release": "next"} if variant == "release_next" else {}
    loader = consumer(address, a, with_info=True, **kw)

    def take(it):
        batches = [next(it) for _ in range(a["keep"])]
        # Checksums at receipt, before anything is closed.
        return batches, [checksum(i, lab, info.sample_ids) for i, lab, info in batches], [
            int(info.sample_ids[0]) for _, _, info in batches]

    if variant == "with":
        with loader:
            it = iter(loader)
            kept, sums, first_ids = take(it)
            del it
    else:
        it = iter(loader)
        kept, sums, first_ids = take(it)
        del it
        if variant in ("close", "release_next"):
            loader.close()
        del loader
        gc.collect()
    bad = [ref.bad(images.numpy(), labels.numpy(), info.sample_ids.numpy())
           for images, labels, info in kept]
    say(closed=True, bad_at_close=bad, first_ids=first_ids)
    wait_for("check")
    now = [checksum(images, labels, info.sample_ids) for images, labels, info in kept]
    say(unchanged=[x == y for x, y in zip(sums, now)],
        first_ids=[int(info.sample_ids[0]) for _, _, info in kept],
        bad_now=[ref.bad(images.numpy(), labels.numpy(), info.sample_ids.numpy())
                 for images, labels, info in kept])


def write_in_place(address, a):
    """Case 4: write into a shared batch in place; the process must die with the guard's
    message (torch) or get a ValueError with the hint (numpy). The second batch: the first
    of every iter() is a private copy (issue 16)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the expected SIGSEGV leaves no core
    torch.set_num_threads(1)
    variant = a["variant"]
    loader = consumer(address, a, output="numpy" if variant.startswith("numpy") else "torch")
    it = iter(loader)
    next(it)
    images, labels = next(it)
    say(writing=variant)
    try:
        if variant == "fill_":
            images.fill_(255)
        elif variant == "mul_":
            images.mul_(3)
        elif variant == "labels_fill_":
            labels.fill_(7)
        elif variant == "tensor_numpy":
            images.numpy()[...] = 0
        elif variant == "numpy_setitem":
            images[...] = 0
        elif variant == "numpy_iadd":
            images += 1
        else:
            raise SystemExit(f"unknown variant {variant}")
    except ValueError as e:
        say(error=type(e).__name__, message=str(e))
        return
    say(wrote=True)


def writable(address, a, ref):
    """writable=True: private copies that may be modified and kept beyond buffer_depth."""
    loader = consumer(address, a, with_info=True, writable=True)
    kept, bad = [], 0
    for _ in range(a["epochs"]):
        for images, labels, info in loader:
            p, lab = ref.bad(images.numpy(), labels.numpy(), info.sample_ids.numpy())
            bad += p + lab
            images.fill_(255)   # in place: a private copy, nobody else sees it
            labels.zero_()
            kept.append((images, labels))
    say(batches=len(kept), bad=bad, kept=len(kept),
        all_modified=all(bool((i == 255).all()) and int(lab.sum()) == 0 for i, lab in kept))


def main():
    mode, address, h5, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    if mode == "keep_one":
        keep_one(address, args)
    elif mode == "finish_and_hold":
        finish_and_hold(address, args)
    elif mode == "write_in_place":
        write_in_place(address, args)
    else:
        ref = Reference(h5, args.get("limit", 0))
        {"verify": verify, "close_with_live": close_with_live,
         "writable": writable}[mode](address, args, ref)


if __name__ == "__main__":
    main()
