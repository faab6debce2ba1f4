# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""The Consumer: zero-copy views of shared memory, slot release, len(), bounded memory over
many epochs, errors as exceptions with the C++ message, KeyboardInterrupt while waiting."""
import gc
import math
import os
import signal
import threading

import numpy as np
import pytest
import torch

import batchcast
from conftest import finish, read_address, spawn


def memfd_ranges():
    """(start, end) of every shared memfd mapping of this process."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/memfd:") and parts[1][3] == "s":
                a, b = (int(x, 16) for x in parts[0].split("-"))
                out.append((a, b))
    return out


def inside(ptr, nbytes, ranges):
    return any(a <= ptr and ptr + nbytes <= b for a, b in ranges)


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_tensors_alias_shared_memory(fmnist):
    leader = spawn("leader_helper.py", fmnist["train"], 1, 1, 64, "limit_samples=1024")
    loader = batchcast.Consumer(read_address(leader), batch_size=64, with_info=True)
    seen = 0
    for images, labels, info in loader:
        ranges = memfd_ranges()
        assert ranges, "no shared memfd mapping in this process"
        # The first batch of every iter() is a private copy (a peek may be kept; issue 16).
        for t in (images, labels, info.sample_ids):
            assert inside(t.data_ptr(), t.numel() * t.element_size(), ranges) == (seen > 0)
        assert images.shape == (64, 1, 28, 28) and images.dtype == torch.uint8
        assert labels.dtype == torch.int64
        # A view, not a copy: numpy over the same tensor shares the address.
        assert images.numpy().ctypes.data == images.data_ptr()
        seen += 1
    assert seen == len(loader) == 1024 // 64
    finish(leader)


def test_numpy_output_aliases_too(fmnist):
    leader = spawn("leader_helper.py", fmnist["train"], 1, 1, 50, "limit_samples=500")
    loader = batchcast.Consumer(read_address(leader), batch_size=50, output="numpy")
    for k, (images, labels) in enumerate(loader):
        assert isinstance(images, np.ndarray) and images.shape == (50, 1, 28, 28)
        assert inside(images.ctypes.data, images.nbytes, memfd_ranges()) == (k > 0)
        assert not images.flags.writeable  # read-only, a copy (first of an iter()) or not
    finish(leader)


@pytest.mark.parametrize("batch_size", [64, 100, 128])
def test_len_is_exact(fmnist, batch_size):
    # producer batch 256, 1000 samples: exact batches across producer batches (issue 16 A),
    # one partial last batch, as a DataLoader.
    leader = batchcast.Leader(fmnist["train"], consumers=1, max_batch_size=128, epochs=2,
                              batch_size=128, limit_samples=1000, producer_batch=256)
    loader = batchcast.Consumer(leader.address, batch_size=batch_size)
    expect = math.ceil(1000 / batch_size)
    assert len(loader) == expect
    assert [sum(1 for _ in loader) for _ in range(2)] == [expect, expect]
    assert loader.ended
    with pytest.raises(batchcast.FailedPreconditionError, match="there is no further epoch"):
        sum(1 for _ in loader)  # a third epoch of a 2-epoch stream (issue 34)
    leader.wait()


def test_slot_released_when_tensors_are_freed(fmnist):
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=32,
                              limit_samples=32 * 40)
    loader = batchcast.Consumer(leader.address, batch_size=32, buffer_depth=2)
    it = iter(loader)
    # A private copy (the first of an iter()) and buffer_depth + 1 shared batches.
    kept = [next(it) for _ in range(4)]
    with pytest.raises(batchcast.FailedPreconditionError, match="unreleased batches"):
        next(it)
    # Freeing the tensors gives the slot back; the stream goes on.
    del kept
    gc.collect()
    rest = sum(1 for _ in loader)  # the failed call ended `it`; a new epoch iterator resumes
    assert rest == 40 - 4
    leader.wait()


def test_release_next_mode_keeps_working_with_views_held(fmnist):
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=32,
                              limit_samples=32 * 20)
    loader = batchcast.Consumer(leader.address, batch_size=32, buffer_depth=1, release="next")
    held = [images for images, _ in loader]  # held views do not pin slots in this mode
    assert len(held) == 20
    leader.wait()


def test_memory_does_not_grow_over_many_epochs(fmnist):
    # 20 epochs of 16 batches: measured over the last 240 batches, a leak of one object or
    # one 50 KB batch per batch would exceed the bounds below.
    epochs = 20
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=epochs, batch_size=64,
                              limit_samples=64 * 16)
    loader = batchcast.Consumer(leader.address, batch_size=64, with_info=True)
    rss, objects, mappings = [], [], []
    for epoch in range(epochs):
        total = 0
        for images, labels, info in loader:
            total += int(images[:, 0, 0, 0].sum()) + int(labels.sum())
        gc.collect()
        rss.append(rss_bytes())
        objects.append(len(gc.get_objects()))
        mappings.append(len(memfd_ranges()))
    leader.wait()
    assert loader.stats()["epochs_completed"] == epochs
    assert len(set(mappings)) == 1                  # no mapping per batch or epoch
    assert objects[-1] - objects[4] < 200           # no Python objects leaked per batch
    assert rss[-1] - rss[4] < 8 * 1024 * 1024, rss  # 15 epochs x 16 batches: no per-batch growth


def test_errors_carry_the_cpp_message(fmnist):
    with pytest.raises(batchcast.InvalidArgumentError, match="batch_size") as e:
        batchcast.Consumer("unused", batch_size=0)
    assert isinstance(e.value, ValueError)
    with pytest.raises(batchcast.Error) as e:
        batchcast.Consumer("batchcast-no-such-leader", batch_size=8, connect_timeout=0)
    assert "batchcast-no-such-leader" in str(e.value)
    with pytest.raises(batchcast.NotFoundError, match="/no/such/file.h5"):
        batchcast.Leader("/no/such/file.h5")
    with pytest.raises(batchcast.InvalidArgumentError, match="unknown option"):
        batchcast.Leader(fmnist["train"], no_such_option=1)
    os.environ.pop("BATCHCAST_ADDRESS", None)
    with pytest.raises(batchcast.InvalidArgumentError, match="no leader address"):
        batchcast.Consumer(batch_size=8)


def test_leader_failure_reaches_the_consumer(fmnist):
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=16,
                              limit_samples=16 * 50)
    loader = batchcast.Consumer(leader.address, batch_size=16)
    it = iter(loader)
    next(it)
    leader.close()  # aborts the stream
    with pytest.raises(batchcast.UnavailableError, match="closed from Python"):
        for _ in it:
            pass


def test_keyboard_interrupt_while_waiting(fmnist):
    # The leader waits for two consumers, so the first one blocks until the second joins.
    leader = batchcast.Leader(fmnist["train"], consumers=2, epochs=1, batch_size=16,
                              limit_samples=16 * 4)
    first = batchcast.Consumer(leader.address, batch_size=16)
    # Python ignores SIGINT when it started with SIGINT ignored (a background job of a
    # non-interactive shell, as a CI runner may start the suite): install the usual handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        it = iter(first)
        with pytest.raises(KeyboardInterrupt):
            next(it)
        timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    # The interrupted request is not lost: once the stream starts, it yields every batch.
    second = batchcast.Consumer(leader.address, batch_size=16)
    assert sum(1 for _ in first) == 4
    assert sum(1 for _ in second) == 4
    leader.wait()


def test_numpy_views_are_read_only_with_a_hint(fmnist):
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=32,
                              limit_samples=32 * 2)
    loader = batchcast.Consumer(leader.address, batch_size=32, output="numpy")
    for images, labels in loader:
        assert not images.flags.writeable and not labels.flags.writeable
        assert isinstance(images, batchcast.SharedBatchArray)
        assert not images[0].flags.writeable          # slices stay read-only views
        assert type(images / 255) is np.ndarray        # results are plain arrays
        for write in (lambda: images.__setitem__(Ellipsis, 0), lambda: images[0].fill(0),
                      lambda: labels.__iadd__(1)):
            with pytest.raises(ValueError, match="read-only"):
                write()
        with pytest.raises(ValueError, match="views a shared batch.*writable=True"):
            images[...] = 0
        private = np.array(images)                     # the documented fix
        private[...] = 0
    leader.wait()


@pytest.mark.parametrize("output", ["torch", "numpy"])
def test_writable_batches_are_private_and_hold_no_slot(fmnist, output):
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=32,
                              limit_samples=32 * 10)
    loader = batchcast.Consumer(leader.address, batch_size=32, buffer_depth=1, output=output,
                                writable=True, with_info=True)
    kept = list(loader)                                # 10 batches kept with buffer_depth=1
    assert len(kept) == 10
    ranges = memfd_ranges()
    for images, labels, info in kept:
        if output == "torch":
            assert not inside(images.data_ptr(), images.numel(), ranges)
            images.mul_(0)
            labels.fill_(3)
        else:
            assert images.flags.writeable and images.flags.owndata
            images[...] = 0
            labels[...] = 3
        assert int(images.sum()) == 0 and int(labels.sum()) == 3 * 32
    leader.wait()


def write_skip_dataset(path, n, bad):
    """An encoded dataset written with h5py (variable-length string attributes, as h5py
    writes them by default): 8x8 PNGs, the samples in `bad` zero bytes."""
    import io

    import h5py
    from PIL import Image
    with h5py.File(path, "w") as f:
        f.attrs["batchcast_schema_version"] = 1
        images = f.create_dataset("images", (n,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(n):
            buf = io.BytesIO()
            Image.fromarray(np.full((8, 8, 3), i, np.uint8)).save(buf, format="PNG")
            images[i] = np.zeros(0, np.uint8) if i in bad else np.frombuffer(buf.getvalue(), np.uint8)
        images.attrs["encoding"] = "png"
        f["labels"] = np.arange(n, dtype=np.int64) % 2
        f["widths"] = np.full(n, 8, np.int32)
        f["heights"] = np.full(n, 8, np.int32)
        f["class_names"] = np.array(["even", "odd"], dtype=h5py.string_dtype())
        f.attrs["batchcast_complete"] = 1


def test_epoch_whose_last_producer_batches_are_skipped_ends_at_its_boundary(tmp_path):
    # 40 samples, producer batches of 8 in order: the last one (32..39) and three in a row
    # (8..31 but 16) are entirely zero-byte samples. Every epoch yields exactly its good
    # samples, and the epoch loop never runs into the next epoch.
    n, epochs = 40, 3
    bad = set(range(8, 16)) | set(range(17, 32)) | set(range(32, 40))
    path = str(tmp_path / "skips.h5")
    write_skip_dataset(path, n, bad)
    with batchcast.Leader(path, epochs=epochs, image_size=8, producer_batch=8, shuffle=False,
                          on_bad_sample="skip", batch_size=3, threads=1) as leader:
        loader = batchcast.Consumer(leader.address, batch_size=3, with_info=True)
        got = []
        for _ in range(epochs + 1):
            if loader.ended:  # an iter() past the end raises (issue 34)
                break
            ids = [int(i) for _, _, info in loader for i in info.sample_ids]
            if ids:
                got.append(ids)
        assert leader.wait(60)
    good = [i for i in range(n) if i not in bad]
    assert len(got) == epochs
    for ids in got:
        assert sorted(set(ids)) == good
    assert loader.stats()["epochs_completed"] == epochs
    assert leader.stats()["samples_skipped"] == len(bad) * epochs
