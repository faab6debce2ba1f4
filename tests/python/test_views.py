# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Views from Python (docs/pipeline.md, "Views through the Producer"): Consumer(view=...) on a
Leader(views_max=...) gets its own group's tensor, zero-copy, every sample once per epoch, and
the leader's view stays as it was; views the leader cannot serve are refused with the
cause."""
import threading

import numpy as np
import pytest

import batchcast

SAMPLES = 320


def run(fmnist, views, **leader_options):
    """One leader, one consumer per view in `views` ("" = the leader's), one epoch: what each
    read (sample id -> image bytes) and the images' shapes."""
    got = run_epochs(fmnist, [(v, 32) for v in views], 1, **leader_options)
    return [(epochs[0][0], epochs[0][1]) for epochs in got]


def test_each_consumer_gets_its_views_tensor_once_per_sample(fmnist):
    got = run(fmnist, ["", "view(size=16)", "view(size=16,normalize=1,mean=0.5,std=0.25)"],
              views_max=3)
    (own, own_shapes), (small, small_shapes), (norm, norm_shapes) = got
    assert own_shapes == {(1, 28, 28)}
    assert small_shapes == {(1, 16, 16)}
    assert norm_shapes == {(1, 16, 16)}
    for seen in (own, small, norm):
        assert sorted(seen) == list(range(SAMPLES))
    # The leader's view does not change when other groups are attached.
    (alone, _), = run(fmnist, [""])
    assert alone == own
    # The normalised group is the uint8 group's pixels, normalised (within the rounding of
    # the uint8 output: half a level).
    for sid in (0, 7, SAMPLES - 1):
        u8 = np.frombuffer(small[sid], dtype=np.uint8).astype(np.float64)
        f32 = np.frombuffer(norm[sid], dtype=np.float32).astype(np.float64)
        assert np.allclose(f32, (u8 / 255 - 0.5) / 0.25, atol=0.5 / 255 / 0.25 + 1e-5)
        assert f32.std() > 0  # not a blank image


def test_views_are_refused_with_their_cause(fmnist):
    with batchcast.Leader(fmnist["train"], consumers=0, end_when_empty=False, epochs=1,
                          batch_size=32, limit_samples=SAMPLES) as leader:
        with pytest.raises(batchcast.Error, match="views_max=1"):
            batchcast.Consumer(leader.address, batch_size=32, epochs=1, view="view(size=16)")
    with batchcast.Leader(fmnist["train"], consumers=0, end_when_empty=False, epochs=1,
                          batch_size=32, limit_samples=SAMPLES, views_max=2) as leader:
        with pytest.raises(batchcast.Error, match="unknown key 'szie'"):
            batchcast.Consumer(leader.address, batch_size=32, epochs=1, view="view(szie=16)")
    with pytest.raises(batchcast.Error, match="views_max"):
        batchcast.Leader(fmnist["train"], epochs=1, batch_size=32, views_max=17)
    with pytest.raises(batchcast.Error, match="not a leader's resize"):
        with batchcast.Leader(fmnist["train"], consumers=0, end_when_empty=False, epochs=2,
                              batch_size=32, limit_samples=SAMPLES, views_max=2) as leader:
            batchcast.Consumer(leader.address, batch_size=32, epochs=2,
                               view="view(resize=resize(min=16,max=28,step=4))")


def read_epochs(consumer, count, out):
    """Per epoch of `count` (one pass over the consumer each, like a DataLoader): (sample id ->
    image bytes), the images' shapes and info.image_size values."""
    epochs = {}
    for _ in range(count):
        for images, labels, info in consumer:
            arr = images.numpy() if hasattr(images, "numpy") else images
            seen, shapes, sizes = epochs.setdefault(int(info.epoch), ({}, set(), set()))
            ids = [int(x) for x in info.sample_ids]
            for i, sid in enumerate(ids[: len(ids) - info.repeats]):
                assert sid not in seen, f"sample {sid} twice in epoch {info.epoch}"
                seen[sid] = arr[i].tobytes()
            shapes.add(tuple(arr.shape[1:]))
            sizes.add(int(info.image_size))
    out.append(epochs)


def run_epochs(fmnist, views, epochs, **leader_options):
    """One leader, one consumer per view: what each read per epoch."""
    with batchcast.Leader(fmnist["train"], consumers=len(views), epochs=epochs, batch_size=32,
                          limit_samples=SAMPLES, seed=5, **leader_options) as leader:
        consumers = [batchcast.Consumer(leader.address, batch_size=b, epochs=epochs, view=v,
                                        with_info=True) for v, b in views]
        outs = [[] for _ in views]
        threads = [threading.Thread(target=read_epochs, args=(c, epochs, o))
                   for c, o in zip(consumers, outs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert leader.wait(60)
        return [o[0] for o in outs]


def test_a_view_on_its_own_schedule_changes_size_at_epoch_boundaries(fmnist):
    """docs/progressive-resizing.md "A schedule per view": two trials on different schedules
    and one on the leader's view share one leader; each epoch of a scheduled view is at its
    schedule's size (tensor shape and info.image_size), every sample once per epoch, and the
    pixels are a one-view leader's at that size (draw=leader: the leader's draws)."""
    grow = "view(resize=16@0:24@1:20@2,draw=leader)"
    shrink = "view(resize=24:12@2,draw=leader)"
    own, grown, shrunk = run_epochs(fmnist, [("", 32), (grow, 32), (shrink, 20)], 3,
                                    views_max=3)
    want = {grow: [16, 24, 20], shrink: [24, 24, 12]}
    for spec, got in ((grow, grown), (shrink, shrunk)):
        assert sorted(got) == [0, 1, 2]
        for epoch, (seen, shapes, sizes) in got.items():
            size = want[spec][epoch]
            assert shapes == {(1, size, size)}, (spec, epoch, shapes)
            assert sizes == {size}, (spec, epoch, sizes)
            assert sorted(seen) == list(range(SAMPLES)), (spec, epoch)
    for epoch, (seen, shapes, _) in own.items():
        assert shapes == {(1, 28, 28)}
        assert sorted(seen) == list(range(SAMPLES))
    # Against one-view leaders at each size (same seed, the leader's draws).
    for size in (12, 16, 20, 24):
        ref, = run_epochs(fmnist, [("", 32)], 3, image_size=size)
        compared = 0
        for spec, got in ((grow, grown), (shrink, shrunk)):
            for epoch, (seen, _, _) in got.items():
                if want[spec][epoch] != size:
                    continue
                assert seen == ref[epoch][0], (spec, epoch, size)
                compared += 1
        assert compared > 0


def test_a_leader_on_its_own_schedule_serves_other_views_at_their_sizes(fmnist):
    """A Leader with resize= serves views beside its own schedule: its consumers get its
    schedule's sizes; a fixed view and a view with its own schedule get theirs, every sample
    once per epoch."""
    own, fixed, grown = run_epochs(
        fmnist, [("", 32), ("view(size=20)", 32), ("view(resize=12:24)", 16)], 2, views_max=3,
        resize="resize(sizes=16:28,upgrade=0.5)")
    assert own[0][1] == {(1, 16, 16)}  # the leader's epoch 0: all at its smallest size
    for got, sizes in ((fixed, [20, 20]), (grown, [12, 24])):
        assert sorted(got) == [0, 1]
        for epoch, (seen, shapes, infos) in got.items():
            assert shapes == {(1, sizes[epoch], sizes[epoch])}, (epoch, shapes)
            assert infos == {sizes[epoch]}
            assert sorted(seen) == list(range(SAMPLES))
