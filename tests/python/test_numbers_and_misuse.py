# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Numbers mean what they say, misuse is a clear error (issue 34): buffer_depth as given
against the leader's range, a loop over more epochs than the stream has, a Consumer used after
close(), and a Leader whose consumer crashed."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import batchcast

BATCHES = 12


def leader(fmnist, epochs=1, **kw):
    return batchcast.Leader(fmnist["train"], epochs=epochs, batch_size=16,
                            limit_samples=16 * BATCHES, **kw)


def test_buffer_depth_is_checked_as_given_against_the_leader_range(fmnist):
    """A leader whose range is 1..3 (ring_slots = buffer_depth + 2 = 4) admits buffer_depth=3;
    the consumer used to ask for 3 + 1 = 4 and was refused with a message about 4."""
    ldr = leader(fmnist, epochs=1)
    loader = batchcast.Consumer(ldr.address, batch_size=16, buffer_depth=3)
    assert [c["buffer_depth"] for c in ldr.stats()["consumers"]] == [3]
    kept = []
    for k, (images, _) in enumerate(loader):
        # Keeps two shared batches (the first of an iter() is a private copy) across the
        # loop: with the loop's own batch that is 3 unreleased at each fetch, as 3 allows.
        if k in (1, 2):
            kept.append(images)
    assert k == BATCHES - 1 and len(kept) == 2
    del kept, images
    loader.close()
    ldr.wait()
    # One more than 3 + the loop's batch is refused naming the number as the caller gave it.
    ldr = leader(fmnist, epochs=1)
    loader = batchcast.Consumer(ldr.address, batch_size=16, buffer_depth=3)
    with pytest.raises(batchcast.FailedPreconditionError) as e:
        list(loader)
    assert "holds 4 unreleased batches (buffer_depth=3 + the loop's batch)" in str(e.value)
    ldr.close()
    # Beyond the range: the refusal names the number given, not one more.
    ldr = leader(fmnist, epochs=1)
    with pytest.raises(batchcast.InvalidArgumentError) as e:
        batchcast.Consumer(ldr.address, batch_size=16, buffer_depth=4)
    assert "buffer depth 4 is outside 1..3" in str(e.value), str(e.value)
    ldr.close()


def test_a_loop_over_more_epochs_than_the_stream_raises(fmnist):
    """`for epoch in range(2)` around a per-epoch loop under a 1-epoch leader: the second
    epoch raises, naming both epoch counts, instead of running on zero batches."""
    ldr = leader(fmnist, epochs=1)
    loader = batchcast.Consumer(ldr.address, batch_size=16)  # epochs=None: the stream's
    seen = []
    with pytest.raises(batchcast.FailedPreconditionError) as e:
        for epoch in range(2):
            seen.append(sum(1 for _ in loader))
    assert seen == [BATCHES]
    msg = str(e.value)
    assert "completed 1 epoch and the leader's stream at" in msg, msg
    assert "has 1 epoch: there is no further epoch" in msg, msg
    ldr.wait()
    # An explicit epochs= below the stream's: the loop past it raises too, naming both.
    ldr = leader(fmnist, epochs=2)
    loader = batchcast.Consumer(ldr.address, batch_size=16, epochs=1)
    assert sum(1 for _ in loader) == BATCHES
    with pytest.raises(batchcast.FailedPreconditionError) as e:
        next(iter(loader))
    assert "completed the 1 epoch it asked for" in str(e.value), str(e.value)
    assert "has 2 epochs" in str(e.value), str(e.value)
    loader.close()
    ldr.wait()


def test_a_closed_consumer_raises_naming_it(fmnist):
    ldr = leader(fmnist, epochs=1)
    loader = batchcast.Consumer(ldr.address, batch_size=16)
    images, _ = next(iter(loader))
    loader.close()
    loader.close()  # again: nothing to do
    for use in (lambda: next(iter(loader)), loader.state_dict,
                lambda: loader.load_state_dict({"start_epoch": 0, "start_batch": 3})):
        with pytest.raises(batchcast.FailedPreconditionError) as e:
            use()
        msg = str(e.value)
        assert f"batchcast.Consumer of '{ldr.address}'" in msg and "closed" in msg, msg
    assert images.sum().item() >= 0  # a batch taken before close() stays readable
    ldr.close()


def test_a_too_large_batch_is_refused_with_advice_for_that_front_door(fmnist):
    """The refusal names the knob of the front door the user started: a Producer has no
    producer_batch option (the advice said "start the leader with a larger producer_batch")."""
    import numpy as np
    batches = [(np.zeros((16, 1, 4, 4), np.uint8), np.zeros(16, np.int64))] * 2
    producer = batchcast.Producer(batches, batch_size=16, samples_per_epoch=32)
    with pytest.raises(batchcast.InvalidArgumentError) as e:
        batchcast.Consumer(producer.address, batch_size=32, connect_timeout=0)
    msg = str(e.value)
    assert "batch size 32 is outside 1..16" in msg, msg
    assert "create the batchcast.Producer with max_batch_size=" in msg, msg
    assert "producer_batch" not in msg, msg
    del producer
    ldr = leader(fmnist, epochs=1)
    with pytest.raises(batchcast.InvalidArgumentError) as e:
        batchcast.Consumer(ldr.address, batch_size=32)
    assert "create the batchcast.Leader with max_batch_size=" in str(e.value), str(e.value)
    ldr.close()


CRASHING_CONSUMER = textwrap.dedent("""
    import os, signal, sys
    import batchcast
    loader = batchcast.Consumer(sys.argv[1], batch_size=16)
    next(iter(loader))
    print("one batch", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_leader_wait_reports_a_consumer_that_crashed(fmnist):
    """A Leader whose only consumer is killed after one batch: wait() raises naming it (it
    returned True), and stats() lists it."""
    ldr = leader(fmnist, epochs=1)
    proc = subprocess.run([sys.executable, "-c", CRASHING_CONSUMER, ldr.address],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "one batch" in proc.stdout
    with pytest.raises(batchcast.UnavailableError) as e:
        ldr.wait()
    msg = str(e.value)
    assert "1 consumer(s) were lost before their end" in msg, msg
    assert "died (its connection closed)" in msg, msg
    assert len(ldr.stats()["lost_consumers"]) == 1
    ldr.close()
