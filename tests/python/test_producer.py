# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""The Producer: any Python iterable (numpy generators, a torch DataLoader) as the source of
the node stream; epochs, sample ids, carving for several batch sizes, errors."""
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import batchcast


def numpy_batches(n, batch, with_ids=False, shape=(3, 4, 5)):
    for start in range(0, n, batch):
        idx = np.arange(start, min(n, start + batch))
        images = (idx[:, None, None, None] + np.zeros((1,) + shape)).astype(np.uint8)
        labels = idx * 7
        yield (images, labels, idx + 1000) if with_ids else (images, labels)


class Batches:
    """Re-iterable: each pass is one epoch."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __iter__(self):
        return numpy_batches(*self.args, **self.kwargs)


def consume_all(loader):
    epochs = []
    for _ in range(100):
        if loader.ended:  # an iter() past the end raises (issue 34)
            return epochs
        got = [(images.clone(), labels.clone(), info._replace(sample_ids=info.sample_ids.clone()))
               for images, labels, info in loader]
        epochs.append(got)
    raise AssertionError("stream did not end")


@pytest.mark.parametrize("with_ids", [False, True])
def test_numpy_iterable_exactly_once_per_epoch(with_ids):
    n, epochs = 1000, 3
    producer = batchcast.Producer(Batches(n, 100, with_ids), epochs=epochs, consumers=2,
                                  samples_per_epoch=n).start()
    loaders = [batchcast.Consumer(producer.address, batch_size=b, with_info=True)
               for b in (30, 64)]
    import threading
    results = [None, None]

    def run(i):
        results[i] = consume_all(loaders[i])
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.join()
    for loader, got in zip(loaders, results):
        assert len(got) == epochs
        for epoch, batches in enumerate(got):
            assert len(batches) == len(loader)
            ids = torch.cat([info.sample_ids for _, _, info in batches]).numpy()
            labels = torch.cat([l for _, l, _ in batches]).numpy()
            images = torch.cat([i for i, _, _ in batches])
            assert images.shape[1:] == (3, 4, 5)
            assert {info.epoch for _, _, info in batches} == {epoch}
            base = 1000 if with_ids else 0
            assert set(ids.tolist()) == set(range(base, base + n))
            assert len(ids) - n == sum(info.repeats for _, _, info in batches)
            idx = ids - base  # running index == position in the epoch (no shuffle here)
            assert (labels == idx * 7).all()
            assert (images[:, 0, 0, 0].numpy() == (idx % 256)).all()
    assert producer.stats()["samples"] == n * epochs


def test_dataloader_with_float_transform():
    torch.manual_seed(0)
    x = torch.rand(256, 1, 8, 8)
    y = torch.arange(256)
    data = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    producer = batchcast.Producer(data, epochs=2, consumers=1).start()
    loader = batchcast.Consumer(producer.address, batch_size=32)
    assert len(loader) == 8
    for _ in range(2):
        seen = torch.zeros(256, dtype=torch.int64)
        for images, labels in loader:
            assert images.dtype == torch.float32 and images.shape == (32, 1, 8, 8)
            assert torch.equal(images, x[labels])  # bytes as the DataLoader made them
            seen[labels] += 1
        assert (seen == 1).all()
    producer.join()


def test_iterable_error_fails_the_consumers():
    def broken():
        yield from numpy_batches(200, 50)
        raise ValueError("boom in the user's pipeline")

    producer = batchcast.Producer(broken(), consumers=1, samples_per_epoch=400).start()
    loader = batchcast.Consumer(producer.address, batch_size=50)
    with pytest.raises(batchcast.UnavailableError, match="boom in the user's pipeline"):
        for _ in loader:
            pass
    with pytest.raises(ValueError, match="boom"):
        producer.join()


def test_inconsistent_batch_is_an_error():
    def bad():
        yield from numpy_batches(100, 50)
        yield np.zeros((10, 2, 2), np.uint8), np.zeros(10)

    producer = batchcast.Producer(bad(), consumers=1, samples_per_epoch=110).start()
    loader = batchcast.Consumer(producer.address, batch_size=50)
    with pytest.raises(batchcast.UnavailableError, match="sample shape"):
        for _ in loader:
            pass
    with pytest.raises(batchcast.InvalidArgumentError, match="sample shape"):
        producer.join()


def test_producer_arguments_are_checked():
    with pytest.raises(batchcast.InvalidArgumentError, match="yielded no batch"):
        batchcast.Producer([])
    with pytest.raises(batchcast.InvalidArgumentError, match="dtype int32"):
        batchcast.Producer([(np.zeros((4, 2), np.int32), np.zeros(4))])
    with pytest.raises(batchcast.InvalidArgumentError, match="largest consumer batch"):
        batchcast.Producer(Batches(100, 10), max_batch_size=20)


def test_producer_reads_or_refuses_every_leader_option_from_the_environment(monkeypatch):
    # It reads ring_slots and heartbeat_ms from BATCHCAST_* (its arguments win) ...
    monkeypatch.setenv("BATCHCAST_RING_SLOTS", "7")
    monkeypatch.setenv("BATCHCAST_HEARTBEAT_MS", "3s")
    p = batchcast.Producer(Batches(40, 10))
    assert (p.stats()["ring_slots"], p.stats()["heartbeat_ms"]) == (7, 3000)
    p = batchcast.Producer(Batches(40, 10), ring_slots=5, heartbeat_ms=2000)
    assert (p.stats()["ring_slots"], p.stats()["heartbeat_ms"]) == (5, 2000)
    monkeypatch.delenv("BATCHCAST_RING_SLOTS")
    # ... and refuses the decode pipeline's options, which it would otherwise ignore.
    for var, value in (("BATCHCAST_THREADS", "4"), ("BATCHCAST_CACHE", "1g"),
                       ("BATCHCAST_STAGE", "model(path=x.pt,input=images,output=e)"),
                       ("BATCHCAST_IMAGE_SIZE", "96")):
        monkeypatch.setenv(var, value)
        with pytest.raises(batchcast.InvalidArgumentError) as e:
            batchcast.Producer(Batches(40, 10))
        key = var[len("BATCHCAST_"):].lower()
        message = str(e.value)
        assert f"batchcast.Producer: option '{key}' (set by {var})" in message, message
        assert "batchcast.Leader(dataset=...)" in message, message
        monkeypatch.delenv(var)
    # Options the job's consumers read are theirs, not refused.
    monkeypatch.setenv("BATCHCAST_BATCH_SIZE", "5")
    batchcast.Producer(Batches(40, 10))
