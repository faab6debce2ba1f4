# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""A training script in today's PyTorch idioms (issue 30): the accelerator API with
non-blocking copies, a DataLoader with pinned memory and persistent workers over a
DistributedSampler whose epoch is set every epoch, a learning-rate schedule sized by
len(loader), a torch.compile'd model, mixed precision with torch.amp.autocast, a peek at one
batch before training and early breaks. It runs as it stands on torch 2.x, and on torch 1.13
without what 1.13 lacks (torch.accelerator, torch.compile), as scripts that support both do.

test_torch2_idioms.py runs it with its DataLoader and with the one-line change of
docs/python.md (the test rewrites exactly the DataLoader line) and compares what it prints.

usage: torch2_trainer.py TRAIN_H5 LIMIT EPOCHS BREAK_AFTER
  LIMIT: the file's first LIMIT samples (the leader's limit_samples); BREAK_AFTER: the first
  epoch stops after that many steps (0: none), as a max_steps_per_epoch would.
Prints one JSON line: samples and steps per epoch, len(loader), the final loss.
"""
import json
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class FashionMNIST(Dataset):
    def __init__(self, path, limit):
        with h5py.File(path, "r") as f:
            images = f["images"][:limit]  # N x H x W x 1, uint8
            labels = f["labels"][:limit]
        self.images = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
        self.labels = torch.from_numpy(labels.astype(np.int64))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, k):
        return self.images[k], self.labels[k]


def main():
    path, limit, epochs, break_after = sys.argv[1], *map(int, sys.argv[2:5])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if hasattr(torch, "accelerator"):  # torch >= 2.6
        device = (torch.accelerator.current_accelerator() if torch.accelerator.is_available()
                  else torch.device("cpu"))
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

    train_set = FashionMNIST(path, limit)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=0)
    train_loader = DataLoader(train_set, batch_size=64, sampler=sampler, num_workers=1, pin_memory=True, persistent_workers=True)

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # OneCycleLR raises when stepped more than total_steps times: len() must be exact.
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1,
                                                total_steps=epochs * len(train_loader))
    step_model = torch.compile(model) if hasattr(torch, "compile") else model
    amp_dtype = torch.bfloat16 if device.type == "cpu" else torch.float16

    # A peek before training (shapes for a summary), as many scripts do.
    images, labels = next(iter(train_loader))
    shape = list(images.shape[1:])

    result = {"len": len(train_loader), "shape": shape, "dtype": str(images.dtype),
              "samples": [], "steps": []}
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        samples = steps = 0
        for step, (images, labels) in enumerate(train_loader):
            if epoch == 0 and break_after and step == break_after:
                break  # e.g. max_steps_per_epoch
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            with torch.amp.autocast(device_type=device.type, dtype=amp_dtype):
                loss = F.cross_entropy(step_model(images.float() / 255), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            samples += len(labels)
            steps += 1
        result["samples"].append(samples)
        result["steps"].append(steps)
    result["loss"] = float(loss)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
