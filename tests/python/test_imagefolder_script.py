# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Issue 16's acceptance check: an unmodified ImageFolder training script gives the same
samples per epoch (and len()) with its DataLoader and with the one-line change to
batchcast.Consumer, with and without drop_last (205 images, batch 64: 205 or 192)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import batchcast
from conftest import HERE, one_line_changed

SCRIPT = os.path.join(HERE, "imagefolder_trainer.py")
DATALOADER_LINE = ("train_loader = DataLoader(ImageFolder(root), batch_size=64, shuffle=True, "
                   "drop_last=drop_last)\n")
ONE_LINE_CHANGE = ("import batchcast; train_loader = batchcast.Consumer(batch_size=64, "
                   "drop_last=drop_last)\n")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagefolder")
    rng = np.random.default_rng(0)
    for i in range(205):
        d = root / "images" / ("cat" if i % 3 else "dog")
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), np.uint8)).save(d / f"{i:03d}.png")
    h5 = root / "images.h5"
    subprocess.run([os.environ["BCTEST_BIN"], "convert", "imagefolder", str(root / "images"),
                    "--out", str(h5)], check=True, stdout=subprocess.DEVNULL)
    return root


def run(script, folder, drop_last, env=None):
    r = subprocess.run([sys.executable, str(script), str(folder / "images"), "2",
                        "1" if drop_last else "0"], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("drop_last", [False, True])
def test_one_line_change_keeps_samples_per_epoch(folder, tmp_path, drop_last):
    changed = one_line_changed(SCRIPT, DATALOADER_LINE, ONE_LINE_CHANGE, tmp_path)
    expect = run(SCRIPT, folder, drop_last)
    assert expect == {"samples_per_epoch": [192 if drop_last else 205] * 2,
                      "len": 3 if drop_last else 4}
    with batchcast.Leader(str(folder / "images.h5"), consumers=1, epochs=2, batch_size=64,
                          image_size=16) as leader:
        got = run(changed, folder, drop_last, {"BATCHCAST_ADDRESS": leader.address})
        assert leader.wait(120)
    assert got == expect
