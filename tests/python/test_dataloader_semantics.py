# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Issue 16 A's core as the Python API exposes it: exact partial batches and drop_last like a
DataLoader, mode="shard" with rank/world_size, a resume point (state_dict), and a trainer
that starts before its leader (connect_timeout)."""
import hashlib
import os
import random
import subprocess
import sys
import textwrap
import threading

import pytest
from torch.utils.data import DataLoader

import batchcast
import numpy as np

N = 1000


def samples_per_epoch(fmnist, b, drop_last):
    with batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=64,
                          max_batch_size=64, limit_samples=N, producer_batch=128) as leader:
        loader = batchcast.Consumer(leader.address, batch_size=b, drop_last=drop_last)
        got = sum(int(labels.shape[0]) for _, labels in loader)
        length = len(loader)
        assert leader.wait(120)
    return got, length


@pytest.mark.parametrize("b", [1, 48, 64])
@pytest.mark.parametrize("drop_last", [False, True])
def test_samples_per_epoch_match_a_dataloader(fmnist, b, drop_last):
    reference = DataLoader(range(N), batch_size=b, drop_last=drop_last)
    expect = sum(len(x) for x in reference)
    assert samples_per_epoch(fmnist, b, drop_last) == (expect, len(reference))


def test_shard_ranks_see_disjoint_halves(fmnist):
    with batchcast.Leader(fmnist["train"], consumers=2, epochs=1, batch_size=32,
                          limit_samples=1024) as leader:
        loaders = [batchcast.Consumer(leader.address, batch_size=32, mode="shard", rank=r,
                                      world_size=2, with_info=True) for r in range(2)]
        ids = [[], []]

        def run(r):
            for _, _, info in loaders[r]:
                ids[r].extend(int(i) for i in info.sample_ids)
        threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert leader.wait(120)
    assert len(ids[0]) == len(ids[1]) == 512
    assert not set(ids[0]) & set(ids[1])
    assert sorted(ids[0] + ids[1]) == list(range(1024))


def stream(fmnist, state=None, stop_after=None, load=False):
    """(epoch, index, digest) of every batch, or of the first `stop_after`, with its
    state_dict() then. The state goes to the consumer's constructor, or with load=True to
    load_state_dict() after attach."""
    state = state or {}
    opts = dict(epochs=2, batch_size=32, limit_samples=32 * 10, seed=7)
    with batchcast.Leader(fmnist["train"], consumers=1, **opts, **state) as leader:
        if load:
            loader = batchcast.Consumer(leader.address, batch_size=32, with_info=True)
            loader.load_state_dict(state or {"start_epoch": 0, "start_batch": 0})
        else:
            loader = batchcast.Consumer(leader.address, batch_size=32, with_info=True, **state)
        got = []
        while not loader.ended and len(got) < 20:
            for images, _, info in loader:
                got.append((info.epoch, info.index,
                            hashlib.sha1(images.numpy().tobytes()).hexdigest()))
                if stop_after is not None and len(got) == stop_after:
                    saved = loader.state_dict()
                    loader.load_state_dict(saved)  # the current position: a no-op
                    with pytest.raises(batchcast.FailedPreconditionError,
                                       match="does not rewind or jump for one consumer"):
                        loader.load_state_dict({"start_epoch": 0, "start_batch": 0})
                    leader.close()
                    return got, saved
        assert leader.wait(120)
    return got, None


def test_resume_at_random_points_is_byte_exact(fmnist):
    """An uninterrupted run against runs interrupted at random batches, each resumed from the
    last state_dict() (alternately through the constructor and load_state_dict())."""
    full, _ = stream(fmnist)
    assert len(full) == 20 and [e for e, _, _ in full] == [0] * 10 + [1] * 10
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, 20), 2))
    got, state, at = [], None, 0
    for n, cut in enumerate(cuts + [None]):
        part, state = stream(fmnist, state, None if cut is None else cut - at, load=n % 2 == 0)
        got += part
        at = len(got)
        if state is not None:
            e, b = full[at][:2] if at < 20 else (2, 0)
            assert state == {"start_epoch": e, "start_batch": b}, (seed, cuts)
    assert got == full, f"seed {seed}: cuts {cuts}"


def test_load_state_dict_refuses_what_it_cannot_honour(fmnist):
    # A position before the leader's own start: the Leader replays it to this consumer alone
    # (issue 34: every native-pipeline front door does, as batchcast serve did), byte for byte
    # what a leader started there gives. (Given at attach: loaded afterwards, a stream that
    # fits its ring may have ended meanwhile, which the consumer then says.)
    with batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=32,
                          limit_samples=320) as leader:
        loader = batchcast.Consumer(leader.address, batch_size=32)
        want = [images.numpy().tobytes() for images, _ in loader][5:]
        assert leader.wait(120)
    with batchcast.Leader(fmnist["train"], consumers=1, epochs=2, batch_size=32,
                          limit_samples=320, start_epoch=1, start_batch=3) as leader:
        loader = batchcast.Consumer(leader.address, batch_size=32, with_info=True,
                                    start_epoch=0, start_batch=5)  # before the leader's
        with pytest.raises(batchcast.InvalidArgumentError, match="start_epoch"):
            loader.load_state_dict({"epoch": 1})
        with pytest.raises(batchcast.InvalidArgumentError, match="that epoch has 10 batches"):
            loader.load_state_dict({"start_epoch": 1, "start_batch": 10})
        got = [(info.epoch, info.index, images.numpy().tobytes()) for images, _, info in loader]
        assert [(e, i) for e, i, _ in got] == [(0, i) for i in range(5, 10)]
        assert [b for _, _, b in got] == want
        assert leader.stats()["resume_replays"] == 1
    # A producer that cannot make a passed batch again (batches from an iterable) refuses it,
    # naming the cause and the fix.
    batches = [(np.zeros((32, 1, 4, 4), np.uint8), np.arange(32)) for _ in range(10)]
    producer = batchcast.Producer(batches, epochs=2, start_epoch=1, batch_size=32,
                                  samples_per_epoch=320).start()
    loader = batchcast.Consumer(producer.address, batch_size=32)
    loader.load_state_dict({"start_epoch": 0, "start_batch": 5})
    with pytest.raises(batchcast.FailedPreconditionError,
                       match="already at epoch 1.*external iterable, which cannot make a passed "
                             "batch again.*start_epoch / start_batch"):
        next(iter(loader))
    loader.close()
    producer.join()


class _PacedService:
    """`batchcast serve` over 320 Fashion-MNIST samples (10 batches of 32 per epoch) and a
    pacer: a consumer there from the start that, once start()ed, reads the stream in a thread
    and keeps the SHA-1 of every (epoch, batch) it read in `seen`, until stop()."""

    def __init__(self, fmnist, tag):
        self.sock = f"batchcast-test-{tag}-{os.getpid()}"
        self.serve = subprocess.Popen(
            [os.environ["BCTEST_BIN"], "serve", "--dataset", fmnist["train"], "--batch-size",
             "32", "--limit-samples", "320", "--seed", "7", "--socket", self.sock],
            stdout=subprocess.PIPE, text=True)
        self.seen, self._stop, self._progress = {}, threading.Event(), threading.Condition()
        self._thread = None

    def __enter__(self):
        assert "listening on" in self.serve.stdout.readline()
        self.pacer = batchcast.Consumer(self.sock, batch_size=32, with_info=True, name="pacer")
        return self

    def start(self):
        self._thread = threading.Thread(target=self._pace)
        self._thread.start()

    def _pace(self):
        for images, _, info in self.pacer.batches():
            with self._progress:
                self.seen[(info.epoch, info.index)] = hashlib.sha1(images.numpy().tobytes()).digest()
                self._progress.notify_all()
            if self._stop.is_set():
                return

    def wait_epochs(self, epochs):
        """Blocks until the pacer has read `epochs` whole epochs."""
        with self._progress:
            assert self._progress.wait_for(lambda: len(self.seen) >= epochs * 10, timeout=300)

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.pacer.close()

    def __exit__(self, *exc):
        self.serve.terminate()
        self.serve.wait(60)


def test_service_replays_a_passed_position_to_a_resuming_trial(fmnist):
    """A trial of `batchcast serve` stops at a random batch while a second trial keeps the
    stream going past its position; it comes back with load_state_dict() and gets the rest of
    its epoch replayed to it alone, byte for byte, then a whole epoch of the stream."""
    with _PacedService(fmnist, "resume") as svc:
        trial = batchcast.Consumer(svc.sock, batch_size=32, epochs=3, with_info=True, name="trial")
        svc.start()
        seed = int.from_bytes(os.urandom(4), "little")
        cut = random.Random(seed).randrange(1, 15)
        batches = trial.batches()
        for _ in range(cut):
            next(batches)
        state = trial.state_dict()
        trial.close()
        e, b = state["start_epoch"], state["start_batch"]
        # Its own epoch (below e when it was admitted after the late-join window of epoch 0).
        own = state.get("start_run_epoch", e)
        svc.wait_epochs(e + 2)  # the stream goes on without it, into the epoch after the next
        svc.stop()
        resumed = batchcast.Consumer(svc.sock, batch_size=32, epochs=own + 2, with_info=True)
        resumed.load_state_dict(state)
        got = [(info.epoch, info.index, hashlib.sha1(images.numpy().tobytes()).digest(),
                [int(i) for i in info.sample_ids]) for images, _, info in resumed.batches()]
        rest = [(ep, i, d) for ep, i, d, _ in got[:10 - b]]
        assert rest == [(e, i, svc.seen[(e, i)]) for i in range(b, 10)], f"seed {seed}: {state}"
        later = got[10 - b:]
        assert len(later) == 10 and len({ep for ep, _, _, _ in later}) == 1, f"seed {seed}"
        assert later[0][0] > e and [i for _, i, _, _ in later] == list(range(10)), f"seed {seed}"
        assert sorted(i for *_, ids in later for i in ids) == list(range(320)), f"seed {seed}"


def test_service_trial_resumed_twice_trains_exactly_its_epochs(fmnist):
    """A trial of 3 epochs stops in its first epoch; the stream moves two epochs on; its first
    resume finishes its epoch by a replay and goes on with a later stream epoch, and its
    state_dict() then says its own epoch ("start_run_epoch"); it stops again, the stream moves
    on, and its second resume (Consumer(**state)) trains exactly the 2 epochs it has left:
    every batch byte for byte what the uninterrupted pacer read for that stream epoch."""
    with _PacedService(fmnist, "resume2") as svc:
        trial = batchcast.Consumer(svc.sock, batch_size=32, epochs=3, with_info=True, name="trial")
        svc.start()
        got = []

        def take(consumer, n):
            batches = consumer.batches()
            for _ in range(n) if n is not None else iter(int, 1):
                try:
                    images, _, info = next(batches)
                except StopIteration:
                    return
                got.append((info.epoch, info.index, hashlib.sha1(images.numpy().tobytes()).digest()))

        take(trial, 3)
        state = trial.state_dict()
        trial.close()
        # Its first epoch is the stream's first, or the next (admitted after the late-join
        # window): then its own epoch 0 is stream epoch e0 and the state says so.
        e0 = state["start_epoch"]
        assert state["start_batch"] == 3 and state.get("start_run_epoch", e0) == 0, state
        svc.wait_epochs(e0 + 2)  # the stream is at least two epochs on
        first = batchcast.Consumer(svc.sock, batch_size=32, epochs=3, with_info=True)
        first.load_state_dict(state)
        take(first, 7 + 4)  # the rest of its epoch 0 (replayed), 4 batches of a later one
        moved = first.state_dict()
        first.close()
        assert moved["start_run_epoch"] == 1 and moved["start_epoch"] >= e0 + 2, moved
        assert moved["start_batch"] == 4, moved
        svc.wait_epochs(moved["start_epoch"] + 2)
        second = batchcast.Consumer(svc.sock, batch_size=32, epochs=3, with_info=True, **moved)
        # The training loop's set_epoch counts its own epochs, not the stream's.
        second.sampler.set_epoch(1)
        with pytest.raises(batchcast.InvalidArgumentError, match="in its epoch 1"):
            second.sampler.set_epoch(0)
        take(second, None)
        second.close()
        svc.wait_epochs(got[-1][0] + 1)  # the pacer read every stream epoch the trial trained on
        svc.stop()
        assert len(got) == 30, f"trained {len(got)} batches, asked for 3 epochs of 10"
        epochs = [got[i][0] for i in range(0, 30, 10)]
        assert epochs[0] == e0 and epochs[1] > e0 + 1 and epochs[2] > epochs[1], epochs
        for i, (ep, index, digest) in enumerate(got):
            assert ep == epochs[i // 10] and index == i % 10, (i, ep, index)
            assert digest == svc.seen[(ep, index)], (i, ep, index)
        # A state dict of an older version (no run epoch) still loads.
        old = batchcast.Consumer(svc.sock, batch_size=32, epochs=3, with_info=True)
        old.load_state_dict({"start_epoch": 1, "start_batch": 0})
        assert old.state_dict() == {"start_epoch": 1, "start_batch": 0}
        old.close()

def test_consumer_refuses_leader_only_options():
    for key, value in (("threads", 4), ("dataset", "x.h5"), ("on_bad_sample", "skip"),
                       ("resize", "resize(min=96,max=224)"), ("flip", True)):
        with pytest.raises(batchcast.InvalidArgumentError) as e:
            batchcast.Consumer("batchcast-no-such-leader", batch_size=8, **{key: value})
        message = str(e.value)
        assert f"option '{key}' configures the leader" in message, message
        assert "batchcast.Leader(...)" in message and "batchcast serve" in message, message
        assert "a consumer accepts" in message and "drop_last" in message, message
    # From the environment (a job-wide setting for the leader) it is not the consumer's.
    os.environ["BATCHCAST_THREADS"] = "4"
    try:
        with pytest.raises(batchcast.UnavailableError):
            batchcast.Consumer("batchcast-no-such-leader", batch_size=8, connect_timeout=0)
    finally:
        del os.environ["BATCHCAST_THREADS"]


def test_leader_refuses_consumer_only_options(fmnist):
    # mode and world_size are read by both sides elsewhere (the MPI runtime shards across
    # nodes), but a one-node Leader's stream is carved by each consumer: refused, not ignored
    # (the front-door table, docs/configuration.md).
    for key, value in (("drop_last", True), ("pad_last", True), ("connect_timeout", "5s"),
                       ("mode", "shard"), ("world_size", 4)):
        with pytest.raises(batchcast.InvalidArgumentError) as e:
            batchcast.Leader(fmnist["train"], consumers=1, **{key: value})
        message = str(e.value)
        assert f"batchcast.Leader: option '{key}' is each consumer's own" in message, message
        assert "batchcast.Consumer(address, ...)" in message, message


def test_a_trainer_started_before_its_leader_waits(fmnist):
    address = f"batchcast-test-late-{os.getpid()}"
    trainer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import batchcast
        print("attaching", flush=True)
        loader = batchcast.Consumer({address!r}, batch_size=16, connect_timeout="300s")
        print("batches", sum(1 for _ in loader), flush=True)
    """)], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    # The leader starts only once the trainer is about to attach (so it finds no leader at
    # first, unless this process is faster than its first attempt: the test holds either way).
    assert trainer.stdout.readline().strip() == "attaching"
    with batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=16,
                          limit_samples=16 * 5, address=address) as leader:
        out, _ = trainer.communicate(timeout=300)
        assert leader.wait(120)
    assert trainer.returncode == 0 and out.split() == ["batches", "5"], out
    with pytest.raises(batchcast.UnavailableError, match=address):
        batchcast.Consumer(address, batch_size=16, connect_timeout=0)
