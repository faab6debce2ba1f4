# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""A trainer process: trains a small MLP on the batches of a Batchcast stream and checks
every batch against the HDF5 file the stream comes from. Prints one JSON line.

usage: train_helper.py ADDRESS BATCH_SIZE STREAM_H5 EVAL_H5 EPOCHS [LIMIT]
(LIMIT: the stream holds the file's first LIMIT samples, as the leader's limit_samples)
"""
import json
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

import batchcast


def main():
    address, batch_size, stream_h5, eval_h5, epochs = sys.argv[1:6]
    batch_size, epochs = int(batch_size), int(epochs)
    limit = int(sys.argv[6]) if len(sys.argv) > 6 else None
    with h5py.File(stream_h5, "r") as f:
        ref_images = f["images"][:limit]  # N x H x W x 1 (raw)
        ref_labels = f["labels"][:limit]
    n = len(ref_labels)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = batchcast.Consumer(address, batch_size=batch_size, with_info=True)
    result = {"len": len(loader), "epochs": []}
    for _ in range(epochs):
        counts = np.zeros(n, np.int64)
        repeats = bad_labels = bad_pixels = batches = 0
        epoch = None
        for images, labels, info in loader:
            ids = info.sample_ids.numpy()
            np.add.at(counts, ids, 1)
            repeats += info.repeats
            batches += 1
            epoch = info.epoch
            bad_labels += int((labels.numpy() != ref_labels[ids]).sum())
            got = images.numpy().reshape(len(ids), -1)
            bad_pixels += int((got != ref_images[ids].reshape(len(ids), -1)).any(axis=1).sum())
            loss = F.cross_entropy(model(images.float() / 255.0), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        result["epochs"].append({
            "epoch": epoch, "batches": batches, "missing": int((counts == 0).sum()),
            "extra": int(counts.sum() - n), "repeats": repeats, "bad_labels": bad_labels,
            "bad_pixels": bad_pixels, "loss": float(loss)})
    with h5py.File(eval_h5, "r") as f:
        x = torch.from_numpy(f["images"][:]).permute(0, 3, 1, 2).float() / 255.0
        y = torch.from_numpy(f["labels"][:])
    with torch.no_grad():
        result["accuracy"] = float((model(x).argmax(1) == y).float().mean())
    # Over after its last epoch; an epoch past the stream's end raises (issue 34).
    result["ended"] = loader.ended
    try:
        next(iter(loader))
        result["ended"] = False
    except batchcast.FailedPreconditionError as e:
        result["ended"] = result["ended"] and "there is no further epoch" in str(e)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
