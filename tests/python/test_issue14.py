# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Issue 14, cases 1-4, from a trainer's point of view: holding batches never stalls the
node, closing with live tensors never changes them, and an in-place write never changes
another trainer's data (it ends the writer with a message that names the shared batch).

Every trainer runs in its own process (tests/python/issue14_trainer.py). Steps that must
happen in order across processes are ordered by messages (JSON lines out, a word on stdin
in), never by sleeps; every wait has a generous deadline (BCTEST_HANG_S, default 90 s)
that turns a hang into a failure naming what hung."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading

import pytest

from conftest import HERE

HANG_S = float(os.environ.get("BCTEST_HANG_S", "90"))
GUARD_MESSAGE = "batchcast: this process wrote into a shared batch ("
GUARD_FIX = "images = images.clone() (torch) / np.array(view) (numpy)"

# 512 samples, producer batches of 64 (8 per epoch), consumer batches of 32 (16 per epoch);
# the leader's ring has buffer_depth + 2 = 4 slots, so 3 epochs are 6 turns of the ring.
LIMIT, PRODUCER_BATCH, BATCH = 512, 64, 32
PER_EPOCH = LIMIT // BATCH


class Proc:
    """A helper process whose stdout JSON lines and stderr are read by threads, so every
    wait on it has a deadline."""

    def __init__(self, name, script, *args):
        self.name = name
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), HERE) if p)
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, script), *map(str, args)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        self.lines = queue.Queue()
        self.err = []
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_out(self):
        for line in self.p.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))
        self.lines.put(None)

    def _read_err(self):
        for line in self.p.stderr:
            self.err.append(line)

    def stderr(self):
        for t in self._threads:
            t.join(timeout=HANG_S)
        return "".join(self.err)

    def expect(self, key, what):
        """The next JSON line that has `key`; fails if the process hangs or exits first."""
        while True:
            try:
                msg = self.lines.get(timeout=HANG_S)
            except queue.Empty:
                pytest.fail(f"{self.name} hung: no '{key}' within {HANG_S:.0f} s ({what})")
            if msg is None:
                self.p.wait(timeout=HANG_S)
                pytest.fail(f"{self.name} exited ({self.p.returncode}) before '{key}' "
                            f"({what}):\n{self.stderr()[-4000:]}")
            if "error" in msg and key != "error":
                pytest.fail(f"{self.name}: {msg}")
            if key in msg:
                return msg

    def send(self, word):
        self.p.stdin.write(word + "\n")
        self.p.stdin.flush()

    def wait(self, what):
        try:
            return self.p.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} hung: did not exit within {HANG_S:.0f} s ({what})")

    def kill(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()


@pytest.fixture
def procs():
    """Starts helper processes and kills whatever is left of them after the test."""
    started = []

    def start(name, script, *args):
        p = Proc(name, script, *args)
        started.append(p)
        return p
    yield start
    for p in started:
        p.kill()


def leader(procs, fmnist, consumers, epochs, expect_lost=0):
    p = procs("leader", "leader_helper.py", fmnist["train"], epochs, consumers, BATCH,
              f"limit_samples={LIMIT}", f"producer_batch={PRODUCER_BATCH}",
              f"expect_lost={expect_lost}")
    return p, p.expect("address", "leader start")["address"]


def trainer(procs, fmnist, name, mode, address, **args):
    args = dict({"batch_size": BATCH, "limit": LIMIT}, **args)
    return procs(name, "issue14_trainer.py", mode, address, fmnist["train"], json.dumps(args))


def leader_done(ldr):
    ldr.expect("stats", "leader end of stream")
    assert ldr.wait("leader exit") == 0, ldr.stderr()[-4000:]


def clean_epochs(result, epochs):
    assert len(result["epochs"]) == epochs
    for e in result["epochs"]:
        assert e == {"batches": PER_EPOCH, "bad_pixels": 0, "bad_labels": 0}, result


# --- case 1: keeping fewer than buffer_depth batches never hangs the node -------------------
# In `for images, labels in loader` the loop variables still hold the previous batch while the
# next one is fetched; that one is not counted (issue 16: the consumer asks for
# buffer_depth + 1), so keeping one batch of the loop needs buffer_depth=2, and a peeked
# next(iter(loader)) (a private copy) needs no slot at all: buffer_depth=1. Either way the
# loop sees every batch of every epoch (the peek is the loop's first batch again).
@pytest.mark.parametrize("variant,depth", [("loop", 2), ("peek", 1)])
def test_keeping_one_batch_does_not_hang(procs, fmnist, variant, depth):
    ldr, address = leader(procs, fmnist, consumers=1, epochs=3)
    t = trainer(procs, fmnist, "keep_one trainer", "keep_one", address, epochs=3,
                buffer_depth=depth, variant=variant)
    r = t.expect("batches", "iterate 3 epochs while keeping a batch")
    assert r == {"batches": 3 * PER_EPOCH, "len": PER_EPOCH, "fixed_unchanged": True}
    assert t.wait("trainer exit") == 0
    leader_done(ldr)


def test_keeping_one_batch_with_depth_one_is_a_clear_error(procs, fmnist):
    # The kept batch plus the loop variable fill buffer_depth=1 + the loop's batch: an error
    # that says so and how to fix it, at once, never a hang.
    ldr, address = leader(procs, fmnist, consumers=1, epochs=1)
    t = trainer(procs, fmnist, "keep_one trainer", "keep_one", address, epochs=1,
                buffer_depth=1, variant="loop")
    r = t.expect("refused", "keep the loop's second batch with buffer_depth=1")
    assert r["batches"] == 3, r
    assert "holds 2 unreleased batches (buffer_depth=1 + the loop's batch)" in r["refused"], r
    assert "buffer_depth >= k + 1" in r["refused"] and "writable=True" in r["refused"], r
    assert ".clone()" in r["refused"], r
    assert t.wait("trainer exit") == 0
    ldr.kill()  # its only consumer left mid-epoch; how the leader ends is not this test's


# --- case 2: a trainer that finished but holds its loop variable stalls nobody --------------
def test_finished_trainer_holding_its_last_batch_does_not_stall_others(procs, fmnist):
    ldr, address = leader(procs, fmnist, consumers=2, epochs=3)
    done = trainer(procs, fmnist, "finished trainer", "finish_and_hold", address, epochs=1)
    other = trainer(procs, fmnist, "other trainer", "verify", address, epochs=3)
    assert done.expect("finished", "one epoch")["batches"] == PER_EPOCH
    # It stays alive, holding `images, labels`, while the other trainer runs 3 epochs.
    clean_epochs(other.expect("epochs", "3 epochs beside a finished trainer"), 3)
    done.send("exit")
    assert done.expect("unchanged", "held batch after the others")["unchanged"] is True
    assert done.wait("finished trainer exit") == 0
    assert other.wait("other trainer exit") == 0
    leader_done(ldr)


# --- case 3: close() / del / with while tensors live: their bytes never change --------------
# The three ways of closing at once, each its own keeper process, beside one trainer that
# goes on for 3 epochs (6 turns of the ring) after all of them closed.
CLOSE_VARIANTS = ["close", "del", "with"]


def test_tensors_kept_after_close_do_not_change(procs, fmnist):
    ldr, address = leader(procs, fmnist, consumers=1 + len(CLOSE_VARIANTS), epochs=3)
    keepers = {v: trainer(procs, fmnist, f"{v} trainer", "close_with_live", address,
                          variant=v, keep=3, buffer_depth=2) for v in CLOSE_VARIANTS}
    other = trainer(procs, fmnist, "other trainer", "verify", address, epochs=3)
    # 3 batches: the first of an iter() is a private copy (issue 16), the other two views.
    closed = {v: k.expect("closed", f"take 3 batches, then {v}") for v, k in keepers.items()}
    for v, c in closed.items():
        assert c["bad_at_close"] == [[0, 0]] * 3, (v, c)
    clean_epochs(other.expect("epochs", "3 epochs after the other trainers' close"), 3)
    for v, keeper in keepers.items():
        keeper.send("check")
        r = keeper.expect("unchanged", "kept tensors after the other trainer's epochs")
        assert r["first_ids"] == closed[v]["first_ids"], (v, r)
        assert r["unchanged"] == [True] * 3 and r["bad_now"] == [[0, 0]] * 3, (v, r)
        assert keeper.wait("keeper exit") == 0, (v, keeper.stderr()[-4000:])
    assert other.wait("other trainer exit") == 0
    leader_done(ldr)


def test_release_next_views_stay_mapped_after_close(procs, fmnist):
    # release="next" tensors pin no slot (their bytes may change, as documented), but after
    # close() and `del consumer` they must still point at mapped memory: no crash.
    ldr, address = leader(procs, fmnist, consumers=1, epochs=1)
    keeper = trainer(procs, fmnist, "release=next trainer", "close_with_live", address,
                     variant="release_next", keep=3, buffer_depth=1)
    keeper.expect("closed", "take 3 batches, close, del")
    keeper.send("check")
    r = keeper.expect("unchanged", "read the views after close")
    assert len(r["unchanged"]) == 3
    assert keeper.wait("keeper exit") == 0, keeper.stderr()[-4000:]
    leader_done(ldr)


# --- case 4: an in-place write ends the writer; the other trainer's data never changes -----
# Every write variant at once, each its own writer process on one leader, beside one reader
# that reads only after all writers are done (so the batch they wrote into included).
WRITE_VARIANTS = ["fill_", "mul_", "labels_fill_", "tensor_numpy", "numpy_setitem",
                  "numpy_iadd"]


def test_in_place_write_never_changes_another_trainers_batch(procs, fmnist):
    # The torch writers are stopped by the write guard (SIGSEGV): Leader.wait() names them.
    torch_writers = sum(1 for v in WRITE_VARIANTS if not v.startswith("numpy"))
    ldr, address = leader(procs, fmnist, consumers=1 + len(WRITE_VARIANTS), epochs=2,
                          expect_lost=torch_writers)
    reader = trainer(procs, fmnist, "reading trainer", "verify", address, epochs=2,
                     wait_for_go=True)
    reader.expect("attached", "attach")
    writers = {v: trainer(procs, fmnist, f"{v} writer", "write_in_place", address, variant=v)
               for v in WRITE_VARIANTS}
    outcomes = {}
    for variant, writer in writers.items():
        assert writer.expect("writing", "first batch")["writing"] == variant
    for variant, writer in writers.items():
        rc = writer.wait("writer exit")
        err = writer.stderr()
        outcome = writer.expect("error", "numpy write") if variant.startswith("numpy") else None
        outcomes[variant] = (rc, err, outcome)
    # Only now does the other trainer read: the batch the writers wrote into included.
    reader.send("go")
    seen = reader.expect("epochs", "2 epochs after the writes")
    assert reader.wait("reader exit") == 0
    assert all(e["bad_pixels"] == 0 and e["bad_labels"] == 0 for e in seen["epochs"]), (
        f"a write ({', '.join(WRITE_VARIANTS)}) changed the other trainer's batches: {seen}")
    clean_epochs(seen, 2)
    for variant, (rc, err, outcome) in outcomes.items():
        if outcome is not None:
            # numpy refuses the write (read-only view) with the hint; the process goes on.
            assert outcome["error"] == "ValueError", (variant, outcome)
            assert "read-only" in outcome["message"], (variant, outcome)
            assert "views a shared batch" in outcome["message"], (variant, outcome)
            assert "writable=True" in outcome["message"], (variant, outcome)
            assert rc == 0, (variant, err[-4000:])
        else:
            # torch has no read-only tensors: the write faults and the guard explains it.
            assert rc == -signal.SIGSEGV, (
                f"the {variant} writer was not stopped (exit {rc}):\n{err[-4000:]}")
            assert GUARD_MESSAGE in err and GUARD_FIX in err, (variant, err[-4000:])
    leader_done(ldr)


def test_writable_gives_private_copies(procs, fmnist):
    ldr, address = leader(procs, fmnist, consumers=2, epochs=2)
    writer = trainer(procs, fmnist, "writable trainer", "writable", address, epochs=2,
                     buffer_depth=1)
    reader = trainer(procs, fmnist, "reading trainer", "verify", address, epochs=2)
    # Kept all 32 batches with buffer_depth=1: private copies pin no slot.
    assert writer.expect("batches", "2 epochs of private copies") == {
        "batches": 2 * PER_EPOCH, "bad": 0, "kept": 2 * PER_EPOCH, "all_modified": True}
    clean_epochs(reader.expect("epochs", "2 epochs beside a writer"), 2)
    assert writer.wait("writer exit") == 0 and reader.wait("reader exit") == 0
    leader_done(ldr)
