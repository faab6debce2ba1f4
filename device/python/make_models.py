"""TorchScript models for the device proof (device/items.sh), made with the machine's torch.

enc.pt: the model stage's encoder (conv -> pool -> linear, 8 outputs, uint8 images scaled
inside), saved on the CPU (the stage moves it to device=cuda).
cls_cuda_a.pt, cls_cuda_b.pt: two small classifiers whose parameters live on cuda:0 and
whose forward moves the batch there and returns the logits to the CPU, so train-many (which
moves nothing itself) trains them on the GPU.
"""
import os
import sys

import torch


class Enc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(2)
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        if x.dim() == 4 and x.size(-1) == 3:  # NHWC from the leader
            x = x.permute(0, 3, 1, 2)
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x / 255.0))), 1))


class Cls(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, width, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(width, 1000)

    def forward(self, x):
        x = x.to(self.fc.weight.device)
        if x.dim() == 4 and x.size(-1) == 3:
            x = x.permute(0, 3, 1, 2)
        x = x.float()
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1)).cpu()


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.script(Enc().eval()).save(os.path.join(out, "enc.pt"))
    if torch.cuda.is_available():
        for name, width in (("a", 8), ("b", 16)):
            torch.jit.script(Cls(width).cuda()).save(os.path.join(out, f"cls_cuda_{name}.pt"))
    print("models in", out)


if __name__ == "__main__":
    main(sys.argv[1])
