# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Variable-length tensors of a consumer's batch (docs/python.md "Variable-length tensors"):
token sequences of different lengths arrive as their values (every sample's rows, one after
another, viewing the leader's shared memory) and int64 row offsets (the batch's own, from 0).
With torch >= 2.3 a consumer yields them as a jagged torch.nested tensor over those two (no
copy); otherwise, and with ``ragged="pair"`` or ``output="numpy"``, as a ``Ragged``."""

import numpy as np


class Ragged:
    """A variable-length tensor of one batch: ``values`` [rows, per-row shape...] and
    ``offsets`` (int64, ``len(batch) + 1``, from 0); sample i is
    ``values[offsets[i]:offsets[i + 1]]``, a view. Both are torch tensors (``output="torch"``)
    or numpy arrays (``output="numpy"``); values are read-only shared memory unless the
    consumer is ``writable=True``.

        for batch in loader:
            tokens = batch["tokens"]                  # Ragged (or a nested tensor, torch 2)
            for seq in tokens: ...                    # one view per sample
            padded = tokens.to_padded(0)              # [batch, longest, ...], a copy
    """

    __slots__ = ("values", "offsets")

    def __init__(self, values, offsets):
        self.values = values
        self.offsets = offsets

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        n = len(self)
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"Ragged indices are sample numbers, not {type(i).__name__}")
        if i < -n or i >= n:
            raise IndexError(f"sample {i} of a batch of {n}")
        i = int(i) % n
        return self.values[int(self.offsets[i]):int(self.offsets[i + 1])]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return (f"Ragged({len(self)} samples, {int(self.offsets[-1])} rows of "
                f"{tuple(self.values.shape[1:])} {self.values.dtype})")

    @property
    def dtype(self):
        return self.values.dtype

    def lengths(self):
        """Rows per sample (int64, one per sample)."""
        return self.offsets[1:] - self.offsets[:-1]

    def unbind(self):
        """Every sample's rows, as views (a list)."""
        return list(self)

    def to_padded(self, padding_value=0):
        """A new dense [batch, longest, per-row shape...] tensor (or array), short samples
        padded with ``padding_value``."""
        if isinstance(self.values, np.ndarray):
            longest = int(np.max(self.lengths(), initial=0))
            out = np.full((len(self), longest) + tuple(self.values.shape[1:]), padding_value,
                          dtype=self.values.dtype)
            for i, seq in enumerate(self):
                out[i, :len(seq)] = seq
            return out
        import torch
        if len(self) == 0:
            return self.values.new_zeros((0, 0) + tuple(self.values.shape[1:]))
        return torch.nn.utils.rnn.pad_sequence(self.unbind(), batch_first=True,
                                               padding_value=padding_value)

    def to_nested(self):
        """A torch.nested tensor of the samples: jagged over values and offsets (no copy) with
        torch >= 2.3, else (torch 1.13) a strided nested tensor of copies."""
        import torch
        jagged = getattr(torch.nested, "nested_tensor_from_jagged", None)
        if jagged is not None:
            return jagged(self.values, self.offsets)
        return torch.nested.nested_tensor([t.clone() for t in self.unbind()])


def has_jagged():
    """Whether this torch makes jagged nested tensors over values and offsets."""
    import torch
    return getattr(torch.nested, "nested_tensor_from_jagged", None) is not None


def make_ragged(values, offsets, nested):
    """The batch's view of a variable-length tensor: a jagged nested tensor when `nested` and
    torch can, else a Ragged."""
    if nested and has_jagged():
        import torch
        return torch.nested.nested_tensor_from_jagged(values, offsets)
    return Ragged(values, offsets)
