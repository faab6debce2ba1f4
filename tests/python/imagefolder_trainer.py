# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""A plain torchvision-style training script over an ImageFolder (an ImageFolder written out,
as torchvision is not installed here). test_imagefolder_script.py runs it unmodified, and with
the documented one-line change of its DataLoader line (docs/python.md, "Before and after").

usage: imagefolder_trainer.py ROOT EPOCHS DROP_LAST(0|1)   prints {"samples_per_epoch", "len"}
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset


class ImageFolder(Dataset):  # torchvision.datasets.ImageFolder: ROOT/<class>/<image>
    def __init__(self, root):
        self.classes = sorted(d for d in os.listdir(root) if not d.startswith("."))
        self.samples = [(os.path.join(root, c, f), i) for i, c in enumerate(self.classes)
                        for f in sorted(os.listdir(os.path.join(root, c)))]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, k):
        path, label = self.samples[k]
        image = np.asarray(Image.open(path).convert("RGB").resize((16, 16)), dtype=np.uint8)
        return torch.from_numpy(image).permute(2, 0, 1).contiguous(), label


root, epochs, drop_last = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
train_loader = DataLoader(ImageFolder(root), batch_size=64, shuffle=True, drop_last=drop_last)
per_epoch = []
for epoch in range(epochs):
    n = 0
    for images, labels in train_loader:
        loss = F.cross_entropy(model(images.float() / 255), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += len(labels)
    per_epoch.append(n)
print(json.dumps({"samples_per_epoch": per_epoch, "len": len(train_loader)}))
