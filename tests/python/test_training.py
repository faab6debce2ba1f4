# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Real PyTorch training from Batchcast streams: two trainer processes on one producer,
every sample exactly once per epoch with the right pixels and labels. The streams are the
first samples of the files (limit_samples), enough for the model to learn well above chance
(10%) on the full 10000-image test set. Both streams are in a seeded order (the leader's seed,
the DataLoader's generator), so each trainer's accuracy is the same number in every run."""
from conftest import finish, read_address, spawn


def check_trainer(r, n, epochs, batch_size):
    assert len(r["epochs"]) == epochs
    assert r["len"] == r["epochs"][0]["batches"]
    for e, ep in enumerate(r["epochs"]):
        assert ep["epoch"] == e
        assert ep["missing"] == 0, ep      # every sample at least once ...
        assert ep["extra"] == ep["repeats"], ep  # ... and more only as counted fill repeats
        assert ep["repeats"] < batch_size * ep["batches"]
        assert ep["bad_labels"] == 0 and ep["bad_pixels"] == 0, ep
    assert r["ended"]


def test_two_trainers_on_native_leader(fmnist):
    epochs = 2
    n = 12000
    leader = spawn("leader_helper.py", fmnist["train"], epochs, 2, 100, "seed=7",
                   f"limit_samples={n}")
    address = read_address(leader)
    trainers = [spawn("train_helper.py", address, b, fmnist["train"], fmnist["test"], epochs, n)
                for b in (64, 100)]
    results = [finish(t) for t in trainers]
    stats = finish(leader)["stats"]
    assert stats["samples_produced"] == n * epochs  # decoded once, not once per trainer
    for r, b in zip(results, (64, 100)):
        check_trainer(r, n, epochs, b)
        assert r["accuracy"] > 0.7, r  # the model really learned from the stream


def test_two_trainers_on_producer_wrapping_dataloader(fmnist):
    epochs = 2
    n = 4000
    producer = spawn("producer_helper.py", fmnist["test"], epochs, 2, 128, 2, n)
    address = read_address(producer)
    trainers = [spawn("train_helper.py", address, b, fmnist["test"], fmnist["test"], epochs, n)
                for b in (32, 50)]
    results = [finish(t) for t in trainers]
    stats = finish(producer)["stats"]
    assert stats["samples"] == n * epochs
    assert stats["dropped_batches"] == 0
    for r, b in zip(results, (32, 50)):
        check_trainer(r, n, epochs, b)
        assert r["accuracy"] > 0.6, r
