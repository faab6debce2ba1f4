# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Batches of named tensors (docs/data-plane.md "Named tensors"): a Producer's dict batches
reach Python consumers (torch and numpy, batch sizes that join producer batches) and a C
consumer (the C API by name) intact, every sample's tensors together."""
import os
import subprocess
import threading

import numpy as np
import pytest
import torch

import batchcast


def dict_batches(n, batch, with_images=False):
    """tok int64 [4] = id*4+k, emb float32 [2] = (id, -id), mask bool [4] = k < id % 5,
    half float16 [3] = id % 100 / 4 + k; labels = id % 7; ids shuffled per pass."""
    order = np.random.default_rng(n).permutation(n)
    for start in range(0, n, batch):
        ids = order[start:start + batch].astype(np.int64)
        d = {
            "tok": ids[:, None] * 4 + np.arange(4),
            "emb": np.stack([ids, -ids], axis=1).astype(np.float32),
            "mask": np.arange(4)[None, :] < (ids % 5)[:, None],
            "half": ((ids % 100)[:, None] / 4 + np.arange(3)).astype(np.float16),
            "labels": torch.from_numpy(ids % 7),
            "sample_ids": ids,
        }
        if with_images:
            d["images"] = (ids[:, None, None, None] + np.zeros((1, 2, 3, 3))).astype(np.uint8)
        yield d


class Passes:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __iter__(self):
        return dict_batches(*self.args, **self.kwargs)


def check(batch, ids):
    """Every named tensor of `batch` against the sample ids (torch or numpy)."""
    as_np = {k: (v.numpy() if hasattr(v, "numpy") else np.asarray(v)) for k, v in batch.items()}
    ids = np.asarray(ids)
    assert (as_np["tok"] == ids[:, None] * 4 + np.arange(4)).all()
    assert (as_np["emb"] == np.stack([ids, -ids], axis=1)).all()
    assert as_np["mask"].dtype == np.bool_
    assert (as_np["mask"] == (np.arange(4)[None, :] < (ids % 5)[:, None])).all()
    assert (as_np["half"] == ((ids % 100)[:, None] / 4 + np.arange(3)).astype(np.float16)).all()
    assert (as_np["labels"] == ids % 7).all()
    if "images" in as_np:
        assert (as_np["images"][:, 0, 0, 0] == ids % 256).all()


@pytest.mark.parametrize("with_images", [False, True])
def test_dict_batches_reach_python_consumers_intact(with_images):
    n, epochs = 203, 2
    producer = batchcast.Producer(Passes(n, 32, with_images), epochs=epochs, consumers=2,
                                  samples_per_epoch=n).start()
    torch_loader = batchcast.Consumer(producer.address, batch_size=12, with_info=True)
    numpy_loader = batchcast.Consumer(producer.address, batch_size=7, output="numpy")
    seen = {"torch": [], "numpy": []}

    def run_numpy():
        for _ in range(epochs):
            for batch in numpy_loader:
                assert isinstance(batch, dict)
                seen["numpy"].append(len(batch["labels"]))
    t = threading.Thread(target=run_numpy)
    t.start()
    for _ in range(epochs):
        ids = []
        for batch, info in torch_loader:
            assert sorted(batch) == sorted(["tok", "emb", "mask", "half", "labels"] +
                                           (["images"] if with_images else []))
            assert batch["tok"].dtype == torch.int64 and batch["tok"].shape[1:] == (4,)
            assert batch["mask"].dtype == torch.bool and batch["half"].dtype == torch.float16
            check(batch, info.sample_ids)
            ids += info.sample_ids.tolist()
        assert sorted(ids) == list(range(n))
    t.join()
    producer.join()
    assert sum(seen["numpy"]) == n * epochs


def test_numpy_consumer_checks_every_sample():
    n = 97
    producer = batchcast.Producer(Passes(n, 16), consumers=1, samples_per_epoch=n).start()
    loader = batchcast.Consumer(producer.address, batch_size=10, output="numpy", with_info=True)
    got = 0
    for batch, info in loader:
        check(batch, info.sample_ids)
        got += len(info.sample_ids)
    producer.join()
    assert got == n


def test_dict_batches_reach_a_c_consumer_intact():
    prog = os.environ.get("BCTEST_CAPI")
    if not prog:
        pytest.skip("BCTEST_CAPI (the capi_test program) is not set")
    n = 150

    def batches():
        for d in dict_batches(n, 40):
            yield {"labels": d["labels"], "tok": d["tok"], "emb": d["emb"],
                   "sample_ids": d["sample_ids"]}
    producer = batchcast.Producer(list(batches()), consumers=1, samples_per_epoch=n).start()
    out = subprocess.run([prog, "--named", producer.address, str(n)], capture_output=True,
                         text=True, timeout=120)
    producer.join()
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"named OK {n} samples" in out.stdout


def test_a_dict_batch_without_labels_or_with_changed_tensors_is_refused():
    with pytest.raises(batchcast.InvalidArgumentError, match="needs a 'labels' tensor"):
        batchcast.Producer([{"tok": np.zeros((4, 2))}])

    def changing():
        yield {"labels": np.zeros(4, np.int64), "tok": np.zeros((4, 2), np.int64)}
        yield {"labels": np.zeros(4, np.int64), "tok": np.zeros((4, 2), np.float32)}
    producer = batchcast.Producer(changing(), consumers=1).start()
    loader = batchcast.Consumer(producer.address, batch_size=4)
    with pytest.raises(batchcast.UnavailableError, match="tensor 'tok' has dtype float32"):
        for _ in loader:
            pass
    with pytest.raises(batchcast.InvalidArgumentError,
                       match="tensor 'tok' has dtype float32 in this batch and int64"):
        producer.join()
