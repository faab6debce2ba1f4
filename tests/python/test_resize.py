# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Progressive resizing through batchcast.Leader (docs/progressive-resizing.md, "Front
doors"): a Leader runs a resize schedule; two consumers of different batch sizes read the
whole run and a third joins mid-schedule. Each gets every sample of each stream epoch exactly
once, at the size the schedule gives it (rebuilt by _batchcast._resize_plan), in its own
scaled batches with its LR factor, and every sample's pixels equal a Leader's without a
schedule at that image size. batchcast.Producer refuses a schedule with its cause."""
import hashlib
import threading

import numpy as np
import pytest

import batchcast
from batchcast import _batchcast as _bc

SAMPLES = 300
EPOCHS = 3
SEED = 5
SPEC = "resize(sizes=16:22:28,upgrade=0.5,mode=mixed,final_epochs=1)"


def digest(a):
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).hexdigest()


def read(consumer, epochs, out, on_batch=None):
    """Every batch of `epochs` passes (a pass over a Consumer is one epoch): (stream epoch,
    image size, batch size, lr factor, repeats, ids, digests)."""
    for _ in range(epochs):
        for images, labels, info in consumer:
            arr = images.numpy() if hasattr(images, "numpy") else np.asarray(images)
            ids = [int(x) for x in info.sample_ids]
            assert arr.shape[0] == len(ids) and arr.shape[-1] == arr.shape[-2] == info.image_size
            out.append((int(info.epoch), int(info.image_size), len(ids), float(info.lr_factor),
                        int(info.repeats), ids, [digest(arr[i]) for i in range(len(ids))]))
            if on_batch is not None:
                on_batch(out)


def plain_digests(fmnist, size):
    """{sample: digest} of a Leader without a schedule at image_size=size."""
    out = []
    with batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=50, seed=SEED,
                          limit_samples=SAMPLES, image_size=size) as leader:
        read(batchcast.Consumer(leader.address, batch_size=50, epochs=1, with_info=True), 1, out)
        leader.wait()
    return {sid: d for _, _, _, _, _, ids, ds in out for sid, d in zip(ids, ds)}


def check(batches, batch_size, epochs, first_epoch, plain):
    """The run follows the schedule, exactly once per epoch, pixels as without a schedule."""
    plan = _bc._resize_plan(SPEC, SEED, SAMPLES, EPOCHS, batch_size)
    by_epoch = {}
    for epoch, size, n, lr, repeats, ids, ds in batches:
        assert n == plan["batch"][size], (epoch, size, n)
        assert lr == pytest.approx(plan["lr"][size], rel=1e-5)
        counts, extra = by_epoch.setdefault(epoch, ({}, [0]))
        extra[0] += repeats
        for sid, d in zip(ids, ds):
            counts[sid] = counts.get(sid, 0) + 1
            assert plan["epochs"][epoch][sid] == size, (epoch, sid, size)
            assert d == plain[size][sid], f"epoch {epoch} sample {sid} at {size}"
    assert sorted(by_epoch) == list(range(first_epoch, first_epoch + epochs))
    for epoch, (counts, extra) in by_epoch.items():
        assert set(counts) == set(plan["epochs"][epoch]), epoch
        assert sum(counts.values()) - len(counts) == extra[0], epoch
    return by_epoch


def test_leader_runs_a_schedule_for_every_consumer_and_a_late_joiner(fmnist):
    plain = {s: plain_digests(fmnist, s) for s in (16, 22, 28)}
    out_a, out_b, out_c = [], [], []
    late = {}

    with batchcast.Leader(fmnist["train"], consumers=2, max_batch_size=32, epochs=EPOCHS,
                          batch_size=32, seed=SEED, limit_samples=SAMPLES, image_size=28,
                          resize=SPEC) as leader:
        a = batchcast.Consumer(leader.address, batch_size=32, epochs=EPOCHS, with_info=True)
        b = batchcast.Consumer(leader.address, batch_size=20, epochs=EPOCHS, with_info=True)

        def join_late(seen):
            # Once A is in epoch 1: C joins the running schedule for one epoch.
            if "thread" in late or seen[-1][0] < 1:
                return
            c = batchcast.Consumer(leader.address, batch_size=24, epochs=1, with_info=True)
            late["thread"] = threading.Thread(target=read, args=(c, 1, out_c))
            late["thread"].start()

        threads = [threading.Thread(target=read, args=(a, EPOCHS, out_a, join_late)),
                   threading.Thread(target=read, args=(b, EPOCHS, out_b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert "thread" in late, "consumer A never reached epoch 1"
        late["thread"].join()
        leader.wait()

    check(out_a, 32, EPOCHS, 0, plain)
    check(out_b, 20, EPOCHS, 0, plain)
    # The late joiner is admitted into the stream's epoch 1 (replayed from its start, or
    # caught up) or 2, and follows that epoch's sizes.
    first = out_c[0][0]
    assert first in (1, 2), first
    check(out_c, 24, 1, first, plain)
    # Mixed mode: epoch 1 trains at two sizes; the final epoch at full size only.
    assert {size for e, size, *_ in out_a if e == 1} == {16, 22}
    assert {size for e, size, *_ in out_a if e == 2} == {28}


def test_producer_and_misuse_of_a_schedule_are_refused_with_the_cause(fmnist):
    with pytest.raises(batchcast.InvalidArgumentError) as e:
        batchcast.Producer([(np.zeros((4, 1, 8, 8), np.uint8), np.zeros(4, np.int64))],
                           resize=SPEC)
    message = str(e.value)
    assert "option 'resize' (set in code) is not read by batchcast.Producer" in message, message
    assert "cannot follow one" in message and "batchcast.Leader(dataset=...)" in message, message
    with pytest.raises(batchcast.InvalidArgumentError, match="unknown key 'upgarde'"):
        batchcast.Leader(fmnist["train"], epochs=2, batch_size=32, limit_samples=SAMPLES,
                         resize="resize(sizes=16:28,upgarde=0.5)")
    with pytest.raises(batchcast.Error, match="start_batch"):
        batchcast.Leader(fmnist["train"], epochs=2, batch_size=32, limit_samples=SAMPLES,
                         resize=SPEC, start_batch=1)
