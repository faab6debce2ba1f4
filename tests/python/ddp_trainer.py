# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""A 2-rank DDP training script (torch.distributed, gloo) as a user writes it, started under
`batchcast-run --mode shard`: the launcher gives RANK/WORLD_SIZE/MASTER_* and the BATCHCAST_*
options (mode=shard, batch_size, epochs), so the Consumer line needs no arguments. Rank 0
prints every rank's sample ids of the epoch, gathered over gloo."""
import json

import torch
import torch.distributed as dist
import torch.nn.functional as F

import batchcast

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = batchcast.Consumer(with_info=True)
ids = []
for images, labels, info in train_loader:
    loss = F.cross_entropy(model(images.float() / 255), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    ids.extend(int(i) for i in info.sample_ids)
every = [None] * dist.get_world_size()
dist.all_gather_object(every, ids)
if dist.get_rank() == 0:
    print(json.dumps({"ids": every}), flush=True)
dist.destroy_process_group()
