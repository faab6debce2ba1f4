# An unmodified torch.distributed (DDP-style) script: env:// rendezvous from RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT only, one all_reduce over gloo. batchcast-run must start it as the
# trainers-only world. Prints: ddp RANK=r WORLD_SIZE=w sum=S host=H
import os
import socket

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=__import__("datetime").timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
# One write(2) per line: the launcher forwards several trainers' output into one file, and a
# line split over two writes can interleave with another trainer's.
os.write(1, f"ddp RANK={rank} WORLD_SIZE={world} sum={int(t.item())} "
            f"host={socket.gethostname()}\n".encode())
dist.destroy_process_group()
