# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Variable-length tensors (docs/python.md "Variable-length tensors"): a Producer over a
DataLoader whose samples are token sequences of different lengths (a list collate, a nested
tensor, Python lists of token ids, stacked buckets) reaches torch, numpy and C consumers at
other batch sizes with every sequence whole, exactly once per epoch (checksums of every
sequence's bytes); a batch over the values budget, a sequence ragged in two dimensions and
mixed dtypes are refused naming the tensor; the consumer's views are read-only."""
import collections
import os
import signal
import subprocess
import sys
import textwrap
import threading
import zlib

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import batchcast
from batchcast.ragged import has_jagged

GUARD_MESSAGE = "batchcast: this process wrote into a shared batch ("


def length(i):
    """Sample i's sequence length, 0..11 (every 7th sample empty)."""
    return 0 if i % 7 == 0 else (i * 5) % 12


def tokens(i, dtype=np.int64):
    return (np.arange(length(i)) + 1000 * i).astype(dtype)


class TokenSet(Dataset):
    """Sample i: {"tokens": int64 [length(i)], "feats": float32 [length(i) // 2, 3], "emb":
    float32 [2] (fixed), "label": i % 5}."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rows = length(i) // 2
        feats = np.stack([np.full(rows, i), np.arange(rows), -np.arange(rows)], 1)
        return {"tokens": torch.from_numpy(tokens(i)),
                "feats": torch.tensor(feats, dtype=torch.float32),
                "emb": torch.tensor([i, -i], dtype=torch.float32), "label": i % 5, "id": i}


def list_collate(items):
    """A list collate: per-sample tensors of different lengths stay a list."""
    return {"tokens": [it["tokens"] for it in items], "feats": [it["feats"] for it in items],
            "emb": torch.stack([it["emb"] for it in items]),
            "labels": torch.tensor([it["label"] for it in items]),
            "sample_ids": torch.tensor([it["id"] for it in items])}


def samples_of(x):
    """A variable-length tensor of a consumer batch as numpy arrays, one per sample."""
    if isinstance(x, batchcast.Ragged):
        return [np.asarray(s) for s in x]
    assert x.is_nested, type(x)
    return [t.numpy() for t in x.unbind()]


def digest(i, arrays):
    return (int(i), zlib.crc32(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)))


def expected_digest(i):
    rows = length(i) // 2
    feats = np.stack([np.full(rows, i), np.arange(rows), -np.arange(rows)], 1).astype(np.float32)
    return digest(i, [tokens(i), feats])


def check_batch(batch, ids, counter):
    toks, feats = samples_of(batch["tokens"]), samples_of(batch["feats"])
    emb = np.asarray(batch["emb"])
    assert len(toks) == len(feats) == len(ids) == len(emb)
    for k, i in enumerate(np.asarray(ids)):
        assert toks[k].dtype == np.int64 and feats[k].dtype == np.float32
        assert feats[k].shape[1:] == (3,)
        assert (emb[k] == [i, -i]).all()
        counter[digest(i, [toks[k], feats[k]])] += 1


def test_list_collate_reaches_torch_and_numpy_consumers_whole_exactly_once():
    n, epochs = 157, 2
    loader = DataLoader(TokenSet(n), batch_size=16, shuffle=True, collate_fn=list_collate)
    producer = batchcast.Producer(loader, epochs=epochs, consumers=3).start()
    torch_c = batchcast.Consumer(producer.address, batch_size=6, with_info=True)
    pair_c = batchcast.Consumer(producer.address, batch_size=16, with_info=True, ragged="pair")
    numpy_c = batchcast.Consumer(producer.address, batch_size=11, output="numpy",
                                 with_info=True)
    want = collections.Counter(expected_digest(i) for i in range(n))
    got = {"numpy": [], "pair": []}

    def run(consumer, key):
        for _ in range(epochs):
            seen = collections.Counter()
            for batch, info in consumer:
                assert isinstance(batch["tokens"], batchcast.Ragged)
                check_batch(batch, info.sample_ids, seen)
            got[key].append(seen)
    threads = [threading.Thread(target=run, args=(numpy_c, "numpy")),
               threading.Thread(target=run, args=(pair_c, "pair"))]
    for t in threads:
        t.start()
    for _ in range(epochs):
        seen = collections.Counter()
        for batch, info in torch_c:
            tok = batch["tokens"]
            if has_jagged():  # a jagged nested tensor over the shared values, no copy
                assert tok.is_nested and tok.layout == torch.jagged
            else:  # torch 1.13: the documented fallback
                assert isinstance(tok, batchcast.Ragged) and isinstance(tok.values, torch.Tensor)
                assert tok.offsets.dtype == torch.int64 and int(tok.offsets[0]) == 0
            check_batch(batch, info.sample_ids, seen)
        assert seen == want  # every sequence whole, exactly once
    for t in threads:
        t.join()
    producer.join()
    for key in ("numpy", "pair"):
        assert got[key] == [want] * epochs, key


def test_nested_tensors_and_token_id_lists_are_variable_length():
    n = 40

    def batches():
        for start in range(0, n, 8):
            ids = list(range(start, min(n, start + 8)))
            seqs = [torch.from_numpy(tokens(i) if length(i) else tokens(i + 1)) for i in ids]
            if hasattr(torch, "jagged"):
                nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
            else:
                nested = torch.nested.nested_tensor(seqs)
            yield {"nested": nested, "ids_list": [tokens(i).tolist() for i in ids],
                   "labels": np.array(ids) % 3, "sample_ids": np.array(ids)}
    producer = batchcast.Producer(batches(), consumers=1, samples_per_epoch=n).start()
    consumer = batchcast.Consumer(producer.address, batch_size=5, with_info=True, ragged="pair")
    seen = 0
    for batch, info in consumer:
        for k, i in enumerate(info.sample_ids.tolist()):
            assert (np.asarray(batch["nested"][k]) ==
                    (tokens(i) if length(i) else tokens(i + 1))).all()
            assert np.asarray(batch["ids_list"][k]).tolist() == tokens(i).tolist()
            seen += 1
    producer.join()
    assert seen == n


def test_declared_budget_dtype_and_shape_take_stacked_buckets():
    """Length-bucketed batches stacked by the default collate: each batch (batch, L) with its
    own L, declared variable-length up front."""
    lengths = [3, 0, 5, 1, 4]

    def batches():
        for b, L in enumerate(lengths):
            ids = np.arange(4) + 4 * b
            yield {"tok": np.repeat(ids[:, None], L, axis=1).astype(np.int32),
                   "labels": ids % 2, "sample_ids": ids}
    producer = batchcast.Producer(batches(), consumers=1, samples_per_epoch=20, ragged={
        "tok": {"max_bytes": "4k", "dtype": "int32", "shape": (None,)}}).start()
    consumer = batchcast.Consumer(producer.address, batch_size=4, with_info=True,
                                  output="numpy")
    got = []
    for batch, info in consumer:
        tok = batch["tok"]
        assert isinstance(tok, batchcast.Ragged) and tok.values.dtype == np.int32
        got.append(tok.lengths().tolist())
        for k, i in enumerate(info.sample_ids.tolist()):
            assert (tok[k] == i).all()
    producer.join()
    assert got == [[L] * 4 for L in lengths]


def test_empty_sequences_and_a_batch_of_only_empty_samples():
    def batches():
        yield {"tok": [np.array([1, 2], np.int64), np.zeros(0, np.int64), [3]],
               "labels": np.zeros(3, np.int64)}
        yield {"tok": [[], [], []], "labels": np.ones(3, np.int64)}  # every sample empty
        yield {"tok": [[], [7, 8, 9]], "labels": np.full(2, 2, np.int64)}
    producer = batchcast.Producer(batches(), consumers=1, samples_per_epoch=8).start()
    consumer = batchcast.Consumer(producer.address, batch_size=3, output="numpy")
    got = []
    for batch in consumer:
        tok = batch["tok"]
        assert tok.offsets[0] == 0 and len(tok.offsets) == len(batch["labels"]) + 1
        got += [s.tolist() for s in tok]
        if tok.offsets[-1] == 0:
            assert tok.values.shape == (0,) and tok.to_padded().shape == (len(tok), 0)
    producer.join()
    assert got == [[1, 2], [], [3], [], [], [], [], [7, 8, 9]]


def run_to_failure(batches, consumers=1, **kwargs):
    """Starts a Producer over `batches`, lets a consumer fail, returns the Producer's error."""
    producer = batchcast.Producer(batches, consumers=consumers, **kwargs).start()
    consumer = batchcast.Consumer(producer.address, batch_size=2)
    with pytest.raises(batchcast.UnavailableError):
        for _ in consumer:
            pass
    with pytest.raises(batchcast.InvalidArgumentError) as e:
        producer.join()
    return str(e.value)


def test_a_batch_over_the_budget_is_refused_naming_tensor_batch_bytes_and_option():
    def batches():
        for b, L in enumerate([10, 20, 300]):  # 4 samples of L int64: 320, 640, 9600 bytes
            yield {"tok": [np.arange(L)] * 4, "labels": np.zeros(4, np.int64)}
    message = run_to_failure(batches(), ragged={"tok": 1024})
    assert ("batch 2 of epoch 0: variable-length tensor 'tok' needs 9600 bytes" in message and
            "more than its per-batch budget of 1024 bytes" in message and
            "Producer(..., ragged={'tok': '1m'})" in message), message


def test_unsupported_shapes_and_mixed_dtypes_are_refused_at_the_first_batch():
    def first(tok):
        return [{"tok": tok, "labels": np.zeros(len(tok), np.int64)}]
    cases = [
        ([np.zeros((3, 4)), np.zeros((5, 2))],
         "tensor 'tok' in the first batch has samples of shapes (3, 4) (sample 0) and (5, 2) "
         "(sample 1): only the first dimension of a sample may vary"),
        ([np.zeros(3, np.int64), np.zeros(4, np.int32)],
         "tensor 'tok' in the first batch mixes dtypes: sample 0 is int64, sample 1 is int32"),
        ([[[1, 2], [3]], [[4, 5]]], "sample 0 of tensor 'tok' in the first batch is a nested "
         "list whose inner lists differ in length"),
        ([np.zeros(3), 5], "sample 1 of tensor 'tok' in the first batch is a scalar"),
        ([[], []], "tensor 'tok' has only empty samples (Python lists) in the first batch"),
    ]
    for tok, want in cases:
        with pytest.raises(batchcast.InvalidArgumentError) as e:
            batchcast.Producer(first(tok))
        assert want in str(e.value), (want, str(e.value))
    if hasattr(torch, "jagged"):  # a jagged nested tensor ragged in its second dimension
        nt = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(2, 5)],
                                        layout=torch.jagged)
        with pytest.raises(batchcast.InvalidArgumentError, match="only the first dimension"):
            batchcast.Producer([{"tok": nt, "labels": np.zeros(2, np.int64)}])
    with pytest.raises(batchcast.InvalidArgumentError, match="ragged= names 'nope'"):
        batchcast.Producer(first([[1], [2, 3]]), ragged={"nope": 100})
    with pytest.raises(batchcast.InvalidArgumentError, match="positive size in bytes"):
        batchcast.Producer(first([[1], [2, 3]]), ragged={"tok": "lots"})
    with pytest.raises(batchcast.InvalidArgumentError, match=r"has None \(the varying length\)"):
        batchcast.Producer(first([[1], [2, 3]]), ragged={"tok": {"shape": (2, None)}})


@pytest.mark.parametrize("second, want", [
    ([np.zeros(2, np.int32), np.zeros(1, np.int32)],
     "tensor 'tok' has dtype int32 in batch 1 of epoch 0 and int64 in the first"),
    ([np.zeros((2, 2), np.int64), np.zeros((1, 2), np.int64)],
     "has rows of shape (2,) in batch 1 of epoch 0 and () in the first"),
])
def test_a_later_batch_that_changes_dtype_or_row_shape_is_refused(second, want):
    batches = [{"tok": [np.zeros(3, np.int64), np.zeros(1, np.int64)], "labels": np.zeros(2)},
               {"tok": second, "labels": np.zeros(2)}]
    message = run_to_failure(batches)
    assert want in message, message


def test_a_fixed_tensor_given_as_a_list_later_names_the_option():
    batches = [{"tok": np.zeros((2, 3), np.int64), "labels": np.zeros(2)},
               {"tok": [np.zeros(3, np.int64), np.zeros(1, np.int64)], "labels": np.zeros(2)}]
    message = run_to_failure(batches)
    assert ("tensor 'tok' has the fixed per-sample shape (3,)" in message and
            "ragged={'tok': '<bytes per batch>'}" in message), message


def test_numpy_views_are_read_only_and_writable_consumers_get_private_copies():
    def batches():
        for b in range(4):
            yield {"tok": [np.arange(b + 1), np.arange(b + 2)], "labels": np.zeros(2, np.int64)}
    producer = batchcast.Producer(batches(), consumers=2, samples_per_epoch=8).start()
    shared = batchcast.Consumer(producer.address, batch_size=2, output="numpy")
    private = batchcast.Consumer(producer.address, batch_size=2, writable=True, ragged="pair")
    done = []

    def write_private():
        for batch in private.batches():
            tok = batch["tok"]
            tok.values.add_(100)  # a private copy: allowed, and invisible to the other consumer
            done.append(int(tok.values.min()) >= 100)
    t = threading.Thread(target=write_private)
    t.start()
    for batch in shared.batches():
        tok = batch["tok"]
        with pytest.raises(ValueError, match="views a shared batch"):
            tok[0][0] = 5
        with pytest.raises(ValueError, match="views a shared batch"):
            tok.values += 1
        assert int(tok.values.min()) == 0
    t.join()
    producer.join()
    assert done == [True] * 4


WRITER = textwrap.dedent("""
    import numpy as np, torch, batchcast
    def batches():
        for b in range(6):
            yield {"tok": [np.arange(3) + b, np.arange(5) + b], "labels": np.zeros(2, np.int64)}
    producer = batchcast.Producer(batches(), consumers=1, samples_per_epoch=12).start()
    consumer = batchcast.Consumer(producer.address, batch_size=2)
    for k, batch in enumerate(consumer.batches()):
        tok = batch["tok"]
        values = tok.values() if getattr(tok, "is_nested", False) else tok.values
        print("batch", k, values.tolist(), flush=True)
        if k == 2:
            values.add_(1)  # a shared batch: the read-only guard stops the process
    print("not stopped", flush=True)
""")


def test_torch_writes_into_shared_values_are_stopped_by_the_read_only_guard():
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", WRITER], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert GUARD_MESSAGE in proc.stderr, proc.stderr[-3000:]
    assert "not stopped" not in proc.stdout


def test_carve_offset_consumer_gets_whole_sequences_with_fill_repeats():
    n = 45
    loader = DataLoader(TokenSet(n), batch_size=10, collate_fn=list_collate)
    producer = batchcast.Producer(loader, consumers=1).start()
    consumer = batchcast.Consumer(producer.address, batch_size=4, with_info=True,
                                  carve_offset=True, carve_shuffle=True, ragged="pair")
    seen = collections.Counter()
    for batch, info in consumer:
        check_batch(batch, info.sample_ids, seen)
    producer.join()
    assert set(seen) == {expected_digest(i) for i in range(n)}


def test_ragged_batches_reach_a_c_consumer_intact():
    prog = os.environ.get("BCTEST_CAPI")
    if not prog:
        pytest.skip("BCTEST_CAPI (the capi_test program) is not set")
    n = 93

    def batches():
        for start in range(0, n, 20):
            ids = np.arange(start, min(n, start + 20))
            yield {"tok": [np.arange(i % 5, dtype=np.int64) + i * 10 for i in ids],
                   "emb": np.stack([ids, -ids], 1).astype(np.float32),
                   "labels": ids % 3, "sample_ids": ids}
    producer = batchcast.Producer(batches(), consumers=1, samples_per_epoch=n).start()
    out = subprocess.run([prog, "--ragged", producer.address, str(n)], capture_output=True,
                         text=True, timeout=120)
    producer.join()
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"ragged OK {n} samples" in out.stdout
