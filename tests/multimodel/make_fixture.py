#!/usr/bin/python3
# Test fixture for train-many (tests/multimodel/train_many_test.sh): three tiny TorchScript
# classifiers of different size (an MLP, a LeNet-style CNN, a small ResNet), one model that
# takes 3-channel input (the shape error), the first N Fashion-MNIST training images and
# labels as IDX files, and params.json with every model's parameter count.
# Usage: make_fixture.py OUTDIR [N]
import gzip, json, os, struct, sys

import torch
import torch.nn as nn
import torch.nn.functional as F

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 512
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class LeNet(nn.Module):
    def __init__(self, channels: int = 1):
        super().__init__()
        self.c1 = nn.Conv2d(channels, 4, 5)
        self.c2 = nn.Conv2d(4, 8, 5)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1, stride=2)
        self.a = nn.Conv2d(8, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(x + self.b(F.relu(self.a(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


params = {}
for name, model in [("mlp", Mlp()), ("lenet", LeNet()), ("resnet", ResNet()),
                    ("rgb_lenet", LeNet(3))]:
    torch.jit.script(model).save(os.path.join(out, name + ".pt"))
    params[name] = sum(p.numel() for p in model.parameters())
json.dump(params, open(os.path.join(out, "params.json"), "w"))

src = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
with gzip.open(os.path.join(src, "train-images-idx3-ubyte.gz")) as f:
    magic, total, h, w = struct.unpack(">IIII", f.read(16))
    images = f.read(n * h * w)
with gzip.open(os.path.join(src, "train-labels-idx1-ubyte.gz")) as f:
    f.read(8)
    labels = f.read(n)
with open(os.path.join(out, "images.idx"), "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, h, w) + images)
with open(os.path.join(out, "labels.idx"), "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + labels)
