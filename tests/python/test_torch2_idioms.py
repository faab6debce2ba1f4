# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Today's PyTorch idioms on a Consumer (issue 30), on both torch generations of the suite:
torch2_trainer.py (torch.accelerator, .to(device, non_blocking=True), pin_memory=True,
persistent_workers=True, DistributedSampler.set_epoch, len(loader) sizing a OneCycleLR,
torch.compile, torch.amp.autocast, a peek, an early break) runs with its DataLoader and with
the promised one-line change and prints the same; what a Consumer cannot take is refused with
what to write instead; an uncaught dtype error says what the batches are."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import batchcast
from conftest import HERE, one_line_changed

SCRIPT = os.path.join(HERE, "torch2_trainer.py")
DATALOADER_LINE = ("    train_loader = DataLoader(train_set, batch_size=64, sampler=sampler, "
                   "num_workers=1, pin_memory=True, persistent_workers=True)\n")
ONE_LINE_CHANGE = "    import batchcast; train_loader = batchcast.Consumer(batch_size=64)\n"
LIMIT = 640  # 10 batches of 64 per epoch


def run(script, fmnist, break_after, env=None):
    r = subprocess.run([sys.executable, str(script), fmnist["train"], str(LIMIT), "2",
                        str(break_after)], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})), timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    import json
    return json.loads(r.stdout.splitlines()[-1]), r.stderr


@pytest.fixture(scope="module")
def reference(fmnist):
    """The unchanged script with its DataLoader, whole epochs: what it prints."""
    expect, _ = run(SCRIPT, fmnist, 0)
    assert expect["len"] == 10 and expect["steps"] == [10, 10]
    assert expect["samples"] == [640, 640]
    return expect


@pytest.mark.parametrize("break_after", [0, 3])
def test_torch2_script_runs_unchanged_but_for_the_promised_line(fmnist, tmp_path, reference,
                                                                break_after):
    changed = one_line_changed(SCRIPT, DATALOADER_LINE, ONE_LINE_CHANGE, tmp_path)
    # The DataLoader run with an early break prints the whole-epoch run's len, shape and dtype
    # with `break_after` steps in the epoch that breaks (the script is run once, not per case:
    # each run compiles its model, about 7 s of CPU under torch 2).
    steps = [break_after or 10, 10]
    expect = dict(reference, steps=steps, samples=[64 * s for s in steps])
    with batchcast.Leader(fmnist["train"], consumers=1, epochs=2, batch_size=64,
                          limit_samples=LIMIT) as leader:
        got, err = run(changed, fmnist, break_after, {"BATCHCAST_ADDRESS": leader.address})
        assert leader.wait(300)
    assert {k: got[k] for k in ("len", "shape", "dtype", "samples", "steps")} == \
        {k: expect[k] for k in ("len", "shape", "dtype", "samples", "steps")}
    assert got["loss"] == got["loss"] and got["loss"] < 5  # finite, trained


@pytest.fixture
def leader(fmnist):
    with batchcast.Leader(fmnist["train"], consumers=1, epochs=2, batch_size=64,
                          limit_samples=LIMIT) as ldr:
        yield ldr


@pytest.mark.parametrize("arg, says", [
    ({"num_workers": 4}, "threads=N"),
    ({"persistent_workers": True}, "threads=N"),
    ({"prefetch_factor": 4}, "buffer_depth=N"),
    ({"sampler": object()}, "mode='shard'"),
    ({"batch_sampler": object()}, "batch_size=N"),
    ({"collate_fn": lambda b: b}, "the leader collates"),
    ({"worker_init_fn": print}, "threads=N"),
    ({"generator": torch.Generator()}, "seed"),
    ({"timeout": 5}, "connect_timeout"),
    ({"shuffle": True}, "batchcast.Leader"),
])
def test_dataloader_arguments_are_refused_with_what_to_write(leader, arg, says):
    with pytest.raises(batchcast.InvalidArgumentError) as e:
        batchcast.Consumer(leader.address, batch_size=64, **arg)
    assert says in str(e.value), str(e.value)
    assert next(iter(arg)) in str(e.value)


def test_a_dataset_in_place_of_the_address_is_refused(leader):
    with pytest.raises(batchcast.InvalidArgumentError, match="batchcast.Leader\\(dataset"):
        batchcast.Consumer(torch.utils.data.TensorDataset(torch.zeros(4)), batch_size=64)


def test_pin_memory_is_dataloaders(leader):
    available = (torch.accelerator.is_available() if hasattr(torch, "accelerator")
                 else torch.cuda.is_available())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        loader = batchcast.Consumer(leader.address, batch_size=64, pin_memory=True)
    images, labels = next(iter(loader))
    if available:  # pinned copies, as DataLoader's pin thread makes
        assert images.is_pinned() and labels.is_pinned()
    else:          # DataLoader's own warning, and unpinned batches
        assert any("no accelerator is found" in str(x.message) for x in w)
        assert not images.is_pinned()
    with pytest.raises(batchcast.InvalidArgumentError, match="output='torch'"):
        batchcast.Consumer(leader.address, output="numpy", pin_memory=True)
    loader.close()


def test_sampler_set_epoch_refuses_to_go_back(leader):
    loader = batchcast.Consumer(leader.address, batch_size=64)
    loader.sampler.set_epoch(0)
    assert sum(1 for _ in loader) == 10
    loader.sampler.set_epoch(1)
    with pytest.raises(batchcast.InvalidArgumentError, match="does not go back"):
        loader.sampler.set_epoch(0)
    assert sum(1 for _ in loader) == 10
    loader.close()


def test_an_uncaught_dtype_error_says_what_the_batches_are(fmnist):
    """The one-line swap without the leader's transforms: the script expects what its
    DataLoader gave, the leader normalizes (float32). The error is torch's, and batchcast
    adds what the batches are and where the transforms went."""
    script = textwrap.dedent("""
        import sys, torch, batchcast
        loader = batchcast.Consumer(sys.argv[1], batch_size=64)
        weight = torch.zeros(784, 10, dtype=torch.uint8)
        for images, labels in loader:
            logits = images.flatten(1) @ weight   # the script was written for uint8 batches
    """)
    with batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=64,
                          limit_samples=LIMIT, normalize=True, mean="0.286",
                          std="0.353") as leader:
        r = subprocess.run([sys.executable, "-c", script, leader.address], capture_output=True,
                           text=True, timeout=300)
        leader.close()
    assert r.returncode == 1
    assert "RuntimeError" in r.stderr
    assert ("batchcast: this process trains on batchcast.Consumer batches: images float32 "
            "[64, 1, 28, 28]") in r.stderr, r.stderr[-2000:]
    assert "normalize" in r.stderr.splitlines()[-1]
