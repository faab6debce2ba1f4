# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""A Producer process wrapping an ordinary torch DataLoader (2 workers, shuffling) over an
HDF5 file read with h5py. Prints {"address"} first, then {"stats"} at the end.

usage: producer_helper.py H5 EPOCHS CONSUMERS BATCH_SIZE WORKERS [LIMIT]
(LIMIT: only the file's first LIMIT samples)
"""
import json
import sys

import h5py
import torch
from torch.utils.data import DataLoader, Dataset

import batchcast


class H5Images(Dataset):
    """(image uint8 [1,H,W], label, index); the file is opened lazily in each worker."""

    def __init__(self, path, limit=None):
        self.path = path
        with h5py.File(path, "r") as f:
            self.n = min(len(f["labels"]), limit or len(f["labels"]))
        self.f = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.f is None:
            self.f = h5py.File(self.path, "r")
        img = torch.from_numpy(self.f["images"][i]).permute(2, 0, 1).contiguous()
        return img, int(self.f["labels"][i]), i


def main():
    path, epochs, consumers, batch_size, workers = sys.argv[1:6]
    limit = int(sys.argv[6]) if len(sys.argv) > 6 else None
    torch.set_num_threads(1)
    # A seeded shuffle: the trainers' batches, and so the accuracy test_training checks, are
    # the same in every run (an unseeded order made that accuracy vary from 0.58 to 0.80).
    loader = DataLoader(H5Images(path, limit), batch_size=int(batch_size), shuffle=True,
                        num_workers=int(workers), persistent_workers=int(workers) > 0,
                        generator=torch.Generator().manual_seed(7))
    producer = batchcast.Producer(loader, epochs=int(epochs), consumers=int(consumers))
    print(json.dumps({"address": producer.address}), flush=True)
    stats = producer.run()
    print(json.dumps({"stats": stats}), flush=True)


if __name__ == "__main__":
    main()
