# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""DataLoader idioms on a Consumer (issue 16, issue 30): a kept peek that uses up no batch of
the epoch, an early break (the next iter() starts the next epoch), list(loader), buffer_depth=1 in a for loop, a forked DataLoader worker, the
IterableDataset adapter, and an interpreter exit while a daemon thread waits in next()."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import batchcast
import batchcast.torch

BATCHES = 47  # an odd count, as in the report (a peek made it 46)


def leader(fmnist, epochs=2, batch=16, consumers=1):
    return batchcast.Leader(fmnist["train"], consumers=consumers, epochs=epochs,
                            batch_size=batch, limit_samples=batch * BATCHES)


@pytest.mark.parametrize("depth", [1, 2])
def test_peek_is_kept_and_the_epoch_stays_whole(fmnist, depth):
    ldr = leader(fmnist)
    loader = batchcast.Consumer(ldr.address, batch_size=16, buffer_depth=depth, with_info=True)
    images, labels, info = next(iter(loader))          # the tutorial's peek, kept
    kept = images.clone()
    assert len(loader) == BATCHES
    epochs = []
    for _ in range(2):
        batches = [(int(i.epoch), int(i.index), x.sum().item()) for x, _, i in loader]
        epochs.append(batches)
    assert [len(e) for e in epochs] == [BATCHES, BATCHES]
    # The loop's first batch is the peeked one, not the one after it.
    assert epochs[0][0] == (0, 0, kept.sum().item())
    assert [e[0][0] for e in epochs] == [0, 1]
    assert torch.equal(images, kept)                    # the peek was never overwritten
    ldr.wait()


def test_a_loop_broken_early_starts_the_next_epoch_like_a_dataloader(fmnist):
    """A break past the first batch (max_steps_per_epoch): the next iter() starts at the next
    epoch, as a DataLoader's does; the rest of the broken epoch is given back unread."""
    ldr = leader(fmnist, epochs=3)
    loader = batchcast.Consumer(ldr.address, batch_size=16, buffer_depth=1, with_info=True)
    for k, (_, _, info) in enumerate(loader):
        if k == 2:
            break
    assert int(info.epoch) == 0
    del _, info  # else a kept batch beside the next loop's (buffer_depth=1)
    assert loader.state_dict() == {"start_epoch": 1, "start_batch": 0}
    epoch1 = [(int(i.epoch), int(i.index)) for _, _, i in loader]
    assert epoch1 == [(1, b) for b in range(BATCHES)]
    assert loader.stats()["skipped_after_break"] == BATCHES - 3
    # A break in the last epoch, then iter(): the stream is over, and an epoch past its end
    # is an error naming both epoch counts (issue 34), not an empty epoch.
    for k, _ in enumerate(loader):
        if k == 5:
            break
    with pytest.raises(batchcast.FailedPreconditionError, match="completed 3 epochs and the leader's stream at .* has 3 epochs: there is no further"):
        list(loader)
    assert loader.ended
    ldr.wait()


def test_buffer_depth_one_serves_the_usual_loop(fmnist):
    ldr = leader(fmnist)
    loader = batchcast.Consumer(ldr.address, batch_size=16, buffer_depth=1)
    assert [sum(1 for _ in loader) for _ in range(2)] == [BATCHES, BATCHES]
    ldr.wait()


def test_list_of_an_epoch_fails_with_a_message_naming_clone(fmnist):
    ldr = leader(fmnist, epochs=1)
    loader = batchcast.Consumer(ldr.address, batch_size=16, buffer_depth=2)
    with pytest.raises(batchcast.FailedPreconditionError) as e:
        list(loader)
    msg = str(e.value)
    assert ".clone()" in msg and "writable=True" in msg, msg
    assert "(buffer_depth=2 + the loop's batch)" in msg, msg
    ldr.close()


class ConsumerWrapper(IterableDataset):
    def __init__(self, consumer):
        self.consumer = consumer

    def __iter__(self):
        return iter(self.consumer)


def test_forked_dataloader_worker_fails_at_once(fmnist):
    ldr = leader(fmnist, epochs=1)
    loader = batchcast.Consumer(ldr.address, batch_size=16)
    wrapped = DataLoader(ConsumerWrapper(loader), batch_size=None, num_workers=1,
                         multiprocessing_context="fork")
    with pytest.raises(Exception, match="forked child process.*num_workers=0") as e:
        next(iter(wrapped))
    assert "FailedPreconditionError" in str(e.value) or isinstance(
        e.value, batchcast.FailedPreconditionError)
    # The parent's consumer is untouched by the child: the epoch is all there.
    assert sum(1 for _ in loader) == BATCHES
    ldr.wait()


def test_stream_dataset_plugs_into_a_dataloader(fmnist):
    ldr = leader(fmnist)
    dataset = batchcast.torch.StreamDataset(address=ldr.address, batch_size=16)
    assert isinstance(dataset, torch.utils.data.IterableDataset)
    loader = DataLoader(dataset, batch_size=None)
    assert len(loader) == BATCHES
    for _ in range(2):
        shapes = {tuple(x.shape) for x, _ in loader}
        assert shapes == {(16, 1, 28, 28)}
    ldr.wait()
    with pytest.raises(Exception, match="DataLoader worker.*num_workers=0"):
        next(iter(DataLoader(batchcast.torch.StreamDataset(address=ldr.address),
                             batch_size=None, num_workers=1, multiprocessing_context="fork")))


def test_exit_while_a_daemon_thread_waits_in_next(fmnist):
    # The leader waits for a second consumer that never comes, so next() blocks for good.
    # A huge switch interval makes the main thread run again only once the waiting thread
    # released the GIL inside next() (no sleep, no timing).
    script = textwrap.dedent(f"""
        import sys, threading
        import batchcast
        sys.setswitchinterval(1000)
        leader = batchcast.Leader({fmnist["train"]!r}, consumers=2, epochs=1, batch_size=16,
                                  limit_samples=64)
        consumer = batchcast.Consumer(leader.address, batch_size=16)
        started = threading.Event()
        def wait_forever():
            started.set()
            next(iter(consumer))
        threading.Thread(target=wait_forever, daemon=True).start()
        started.wait()
        print("exiting", flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=dict(os.environ), timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert "exiting" in r.stdout
