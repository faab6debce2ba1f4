# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""batchcast.Producer: publish batches from any Python iterable (a DataLoader with its own
workers and transforms, a generator of numpy arrays) into the node data plane."""

import threading

import numpy as np

from . import _batchcast as _bc
from . import InvalidArgumentError, _env_rank

_END = object()


def _as_array(x, what):
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor, without importing torch
        x = x.detach()
        if getattr(x, "device", None) is not None and x.device.type != "cpu":
            x = x.cpu()
        return x.numpy()
    a = np.asarray(x)
    if a.dtype == object:
        raise InvalidArgumentError(f"producer: {what} is not a tensor or array ({type(x)!r})")
    return a


class _Var:
    """A variable-length field of one batch (docs/python.md "Variable-length tensors"): its
    samples as arrays of any length in their first dimension (a list collate, a strided nested
    tensor), or all their rows one after another with int64 row offsets (a jagged nested
    tensor). dtype and rest (the per-row shape) are the non-empty samples' (None: all empty)."""

    __slots__ = ("samples", "values", "offsets", "dtype", "rest")

    def __init__(self, samples=None, values=None, offsets=None, dtype=None, rest=None):
        self.samples, self.values, self.offsets = samples, values, offsets
        self.dtype, self.rest = dtype, rest

    def longest(self):
        if self.samples is not None:
            return max((len(a) for a in self.samples), default=0)
        return int(np.max(np.diff(self.offsets), initial=0))


def _is_sequence(x):
    return isinstance(x, (list, tuple)) or getattr(x, "ndim", 0) >= 1


def _sample_array(x, name, i, where):
    if isinstance(x, (list, tuple)):
        try:
            a = np.asarray(x)
        except ValueError:  # numpy >= 1.24: an inhomogeneous nested list
            a = None
        if a is None or a.dtype == object:
            raise InvalidArgumentError(
                f"producer: sample {i} of tensor '{name}' in {where} is a nested list whose "
                "inner lists differ in length: only the first dimension of a sample may vary "
                "(values + offsets); pad the inner dimensions to one size")
        return a
    return _as_array(x, f"sample {i} of tensor '{name}' in {where}")


def _var_from_samples(samples, name, where):
    """A variable-length field from per-sample arrays: every sample at least 1-d, and the
    non-empty ones of one dtype and one per-row shape (only the first dimension varies)."""
    arrays = [_sample_array(x, name, i, where) for i, x in enumerate(samples)]
    first = None
    for i, a in enumerate(arrays):
        if a.ndim < 1:
            raise InvalidArgumentError(
                f"producer: sample {i} of tensor '{name}' in {where} is a scalar; a "
                "variable-length tensor's samples are sequences (a list of scalars is a "
                "fixed-shape tensor: give it as one array)")
        if a.shape[0] == 0:
            continue  # an empty sequence: no dtype or per-row shape to agree on
        if first is None:
            first = i
            continue
        f = arrays[first]
        if a.dtype != f.dtype:
            raise InvalidArgumentError(
                f"producer: tensor '{name}' in {where} mixes dtypes: sample {first} is "
                f"{f.dtype.name}, sample {i} is {a.dtype.name}; convert its samples to one dtype")
        if a.shape[1:] != f.shape[1:]:
            raise InvalidArgumentError(
                f"producer: tensor '{name}' in {where} has samples of shapes "
                f"{tuple(f.shape)} (sample {first}) and {tuple(a.shape)} (sample {i}): only "
                "the first dimension of a sample may vary (values + offsets); pad or reshape "
                "the others to one size")
    if first is None:  # all empty: arrays and tensors still have a dtype, Python lists none
        typed = [a for a, x in zip(arrays, samples) if not isinstance(x, (list, tuple))]
        dtype = typed[0].dtype if typed else None
        rest = tuple(typed[0].shape[1:]) if typed else None
        return _Var(samples=arrays, dtype=dtype, rest=rest)
    return _Var(samples=arrays, dtype=arrays[first].dtype, rest=tuple(arrays[first].shape[1:]))


def _var_from_nested(x, name, where):
    """A torch nested tensor: a jagged one as (values, offsets) without a copy, a strided one
    (torch 1.13) by its samples."""
    import torch
    if x.layout == getattr(torch, "jagged", None) and getattr(x, "_lengths", None) is None:
        if getattr(x, "_ragged_idx", 1) != 1:
            raise InvalidArgumentError(
                f"producer: tensor '{name}' in {where} is a nested tensor of shape "
                f"{tuple(x.shape)} ragged in dimension {x._ragged_idx}: only the first "
                "dimension of a sample may vary (values + offsets)")
        values = _as_array(x.values(), f"tensor '{name}'")
        offsets = x.offsets().detach().cpu().numpy().astype(np.int64)
        if offsets[0] != 0:
            values, offsets = values[offsets[0]:offsets[-1]], offsets - offsets[0]
        return _Var(values=np.ascontiguousarray(values), offsets=offsets, dtype=values.dtype,
                    rest=tuple(values.shape[1:]))
    return _var_from_samples(list(x.unbind()), name, where)


def _as_field(x, name, where):
    """A named tensor of a dict batch: an array (fixed per-sample shape), or a _Var for a list
    of per-sample sequences or a torch nested tensor (variable length)."""
    if getattr(x, "is_nested", False):
        return _var_from_nested(x, name, where)
    if isinstance(x, (list, tuple)) and any(_is_sequence(s) for s in x):
        return _var_from_samples(x, name, where)
    return _as_array(x, f"tensor '{name}'")


def _split(item, where="the first batch"):
    """(images, labels, ids, named) as numpy arrays (views of torch tensors, no copy). A dict
    batch names its tensors: "labels" (required), "images" and "sample_ids" (optional), and
    any further tensor, which reaches consumers under its name (docs/python.md); a list of
    per-sample sequences or a nested tensor is a variable-length tensor (_Var)."""
    if isinstance(item, dict):
        if "labels" not in item:
            raise InvalidArgumentError(
                "producer: a dict batch needs a 'labels' tensor (one label per sample); got "
                f"the keys {sorted(item)}")
        images = item.get("images")
        images = None if images is None else _as_array(images, "images")
        labels = _as_array(item["labels"], "labels")
        ids = item.get("sample_ids")
        ids = None if ids is None else _as_array(ids, "sample ids")
        named = {k: _as_field(v, k, where) for k, v in item.items()
                 if k not in ("images", "labels", "sample_ids")}
        return images, labels, ids, named
    if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
        raise InvalidArgumentError(
            "producer: the iterable must yield (images, labels), (images, labels, ids) or a "
            f"dict of named tensors; got {type(item).__name__}" +
            (f" of length {len(item)}" if isinstance(item, (tuple, list)) else ""))
    images = _as_array(item[0], "images")
    labels = _as_array(item[1], "labels")
    ids = _as_array(item[2], "sample ids") if len(item) == 3 else None
    return images, labels, ids, {}


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _budget_bytes(value, name):
    """A values budget: bytes as an int, or a size ("64k", "8m", "2gb"; binary multiples)."""
    text = str(value).strip().lower()
    text = text[:-1] if text.endswith("b") else text
    unit = text[-1:] if text[-1:] in _UNITS else ""
    number = text[:len(text) - len(unit)]
    if not number.isdigit() or int(number) <= 0:
        raise InvalidArgumentError(
            f"producer: ragged={{'{name}': {value!r}}}: the values budget is a positive size in "
            "bytes, e.g. 1048576, '512k', '8m'")
    return int(number) * _UNITS[unit]


def _declared(ragged, name):
    """(budget bytes or None, dtype or None, per-row shape or None) that ragged= declares."""
    spec = ragged.get(name)
    if spec is None:
        return None, None, None
    if not isinstance(spec, dict):
        return _budget_bytes(spec, name), None, None
    unknown = sorted(set(spec) - {"max_bytes", "dtype", "shape"})
    if unknown:
        raise InvalidArgumentError(
            f"producer: ragged={{'{name}': ...}} has the keys {unknown}; it takes max_bytes, "
            "dtype and shape, e.g. {'max_bytes': '8m', 'dtype': 'int64', 'shape': (None, 4)}")
    shape = spec.get("shape")
    if shape is not None:
        shape = tuple(shape)
        if not shape or shape[0] is not None or any(d is None for d in shape[1:]):
            raise InvalidArgumentError(
                f"producer: ragged={{'{name}': {{'shape': {shape}}}}}: the shape of a sample "
                "has None (the varying length) first and fixed extents after it, e.g. (None,) "
                "or (None, 4): only the first dimension may vary")
        shape = tuple(int(d) for d in shape[1:])
    budget = spec.get("max_bytes")
    return (None if budget is None else _budget_bytes(budget, name),
            None if spec.get("dtype") is None else np.dtype(spec["dtype"]).name, shape)


def _tensor_specs(named, ragged=None, batch_size=1):
    """[(name, dtype, per-sample shape[, values budget])] of a batch's named tensors: a
    variable-length tensor has -1 first in its shape and a budget for the values of one batch
    (ragged= or, undeclared, twice batch_size of the first batch's longest sample, at least
    1 MiB)."""
    ragged = dict(ragged or {})
    for name in ragged:
        if name not in named:
            raise InvalidArgumentError(
                f"producer: ragged= names '{name}', which the first batch does not have as a "
                f"further tensor (it has {sorted(named)}; images, labels and sample_ids have "
                "fixed shapes)")
    specs = []
    for k, a in named.items():
        budget, dtype, rest = _declared(ragged, k)
        if not isinstance(a, _Var) and k not in ragged:
            specs.append((k, a.dtype.name, tuple(int(d) for d in a.shape[1:])))
            continue
        var = a if isinstance(a, _Var) else _stacked_var(a, k, "the first batch")
        dtype = dtype or (var.dtype.name if var.dtype is not None else None)
        rest = rest if rest is not None else var.rest
        if dtype is None or rest is None:
            raise InvalidArgumentError(
                f"producer: tensor '{k}' has only empty samples (Python lists) in the first "
                "batch, so its dtype is unknown: declare it, e.g. "
                f"ragged={{'{k}': {{'max_bytes': '8m', 'dtype': 'int64', 'shape': (None,)}}}}")
        row = int(np.dtype(dtype).itemsize * np.prod(rest, dtype=np.int64))
        if budget is None:
            budget = max(1 << 20, 2 * int(batch_size) * max(var.longest(), 1) * row)
        specs.append((k, dtype, (-1,) + tuple(int(d) for d in rest), int(budget)))
    return specs


def _stacked_var(a, name, where):
    """A stacked array (batch, length, ...) given for a variable-length tensor: every sample
    of that length."""
    if a.ndim < 2:
        raise InvalidArgumentError(
            f"producer: variable-length tensor '{name}' in {where} is an array of shape "
            f"{tuple(a.shape)}; give a list of per-sample sequences, a nested tensor, or an "
            "array (batch, length, ...)")
    n, length = a.shape[0], a.shape[1]
    values = np.ascontiguousarray(a).reshape((n * length,) + tuple(a.shape[2:]))
    return _Var(values=values, offsets=np.arange(n + 1, dtype=np.int64) * length,
                dtype=a.dtype, rest=tuple(a.shape[2:]))


def _var_payload(var, name, dtype, rest, where):
    """A variable-length tensor of one batch checked against the first batch's dtype and
    per-row shape, as the C++ producer copies it: per-sample arrays, or (values, offsets)."""
    if var.dtype is not None and var.dtype.name != dtype:
        raise InvalidArgumentError(
            f"producer: tensor '{name}' has dtype {var.dtype.name} in {where} and {dtype} in the "
            "first; convert it")
    if var.rest is not None and tuple(var.rest) != tuple(rest):
        raise InvalidArgumentError(
            f"producer: variable-length tensor '{name}' has rows of shape {tuple(var.rest)} in "
            f"{where} and {tuple(rest)} in the first: only the first dimension of a sample may "
            "vary")
    if var.samples is None:
        return (var.values, var.offsets)
    return [a if a.shape[0] > 0 else np.zeros((0,) + tuple(rest), dtype) for a in var.samples]


def _named_arrays(named, specs, where="this batch"):
    """The batch's named tensors in the order of the first batch's, checked against it."""
    if sorted(named) != sorted(s[0] for s in specs):
        raise InvalidArgumentError(
            f"producer: a batch with the tensors {sorted(named)}; every batch must have the "
            f"first batch's {sorted(s[0] for s in specs)}")
    out = []
    for spec in specs:
        name, dtype, shape = spec[:3]
        a = named[name]
        if len(spec) == 4:  # variable-length
            var = a if isinstance(a, _Var) else _stacked_var(a, name, where)
            out.append(_var_payload(var, name, dtype, shape[1:], where))
            continue
        if isinstance(a, _Var):
            raise InvalidArgumentError(
                f"producer: tensor '{name}' has the fixed per-sample shape {tuple(shape)} (the "
                f"first batch's), but {where} gives it as a list of sequences or a nested "
                "tensor; give every batch the first batch's way, or declare it variable-length "
                f"from the start: Producer(..., ragged={{'{name}': '<bytes per batch>'}})")
        if a.dtype.name != dtype:
            raise InvalidArgumentError(
                f"producer: tensor '{name}' has dtype {a.dtype.name} in this batch and {dtype} "
                "in the first; convert it")
        out.append(a)
    return out


def _sample_layout(images):
    rest = tuple(int(d) for d in images.shape[1:])
    if len(rest) > 3 or images.ndim < 1:
        raise InvalidArgumentError(
            f"producer: images of shape {tuple(images.shape)}; expected (batch, [C,] [H,] W)")
    shape = (1,) * (3 - len(rest)) + rest
    if images.dtype.kind == "f":
        dtype = "float32"
    elif images.dtype in (np.uint8, np.bool_):
        dtype = "uint8"
    else:
        raise InvalidArgumentError(
            f"producer: images of dtype {images.dtype}; use uint8 or a float type (sent as "
            "float32)")
    return shape, dtype


def _epoch_samples(iterable, batch_size):
    """Samples per epoch of a DataLoader-like iterable, or 0 when unknown."""
    dataset = getattr(iterable, "dataset", None)
    if getattr(iterable, "drop_last", False):
        try:
            return len(iterable) * batch_size
        except TypeError:
            return 0
    if dataset is not None:
        try:
            return len(dataset)
        except TypeError:
            return 0
    return 0


class _Feed:
    """The iterator side of a Producer, called by the C++ producer (its batch maker): one pass
    over the iterable per epoch, each batch split and checked against the first batch's
    tensors. Holds no reference to the Producer (the C++ side holds this object)."""

    def __init__(self, iterable, first, specs):
        self._iterable = iterable
        self._first = first  # (iterator, first item) peeked to learn the layout
        self._specs = specs
        self._it = None
        self._peeked = _END
        self._epoch = 0
        self._k = 0  # the pass's batches fetched so far (for messages)

    def _begin(self, epoch):
        self._epoch, self._k = epoch, 0
        if self._first is not None:
            self._it, self._peeked = self._first
            self._first = None
        else:
            self._it = iter(self._iterable)
            self._peeked = _END

    def _fetch(self):
        if self._peeked is not _END:
            item, self._peeked = self._peeked, _END
        else:
            item = next(self._it, _END)
        if item is _END:
            return None
        where = f"batch {self._k} of epoch {self._epoch}"
        self._k += 1
        images, labels, ids, named = _split(item, where)
        return (images, labels, ids, _named_arrays(named, self._specs, where))


class Producer:
    """Publishes every batch of ``iterable`` once to all attached consumers.

    One pass over the iterable is one epoch (``epochs`` passes in all; a DataLoader with
    shuffle=True reshuffles each pass). Each item is ``(images, labels)``,
    ``(images, labels, ids)`` or a dict of named tensors (``{"tokens": ..., "mask": ...,
    "labels": ...}``: "labels" required, "images" and "sample_ids" optional, every other
    tensor reaches consumers under its name) as torch tensors or numpy arrays; images are (batch, C, H, W),
    (batch, H, W) or (batch, D), uint8 or float (sent as float32); consumers always see
    4-d images (batch, C, H, W). Sample ids are the ids the iterable yields, else the running
    index of the sample within its epoch. Each batch is copied once into shared memory;
    consumers carve their own batch sizes (<= max_batch_size) from it.

    The stream is run by the same C++ producer as every front door's (docs/architecture.md):
    a consumer that joins within the late-join window of an epoch (``late_join_window``, at
    least the ring's depth in batches) gets the epoch's first batches replayed to it alone
    (the producer keeps copies of them); later joiners start at the next epoch. With
    ``start_epoch``/``start_batch`` the stream resumes there: the iterable's batches before
    that position are read and not published (a deterministic iterable gives the same
    stream again).

    consumers: joins to wait for before the first batch.
    batch_size: samples per published batch (default: the iterable's batch_size or the
      first batch's size); every batch holds at most this many.
    samples_per_epoch: for the consumers' len() (default: len(iterable.dataset)).
    sample_shape, dtype: the image layout; default: taken from the first batch.
    ragged: variable-length tensors of dict batches (token sequences; docs/python.md
      "Variable-length tensors"): {name: budget} with the room for the values of one batch
      in bytes (an int or "8m"), or {name: {"max_bytes": ..., "dtype": ..., "shape": (None,
      ...)}}. A list of per-sample sequences or a torch nested tensor is variable-length
      without it (budget: twice batch_size of the first batch's longest sample, at least
      1 MiB); a batch whose values need more is refused naming the tensor, the batch and
      the bytes.
    end_when_empty: end the stream once every consumer has left.
    telemetry: a telemetry spec (``"json=producer.json"``, ``"hdf5=run.%r.h5,interval=1s"``,
      ``"on"``), written with the summary when the stream ends or fails (docs/python.md).
    rank, run_name: this process's rank and the run's name in telemetry.
    ring_slots, heartbeat_ms, buffer_depth: the ring's slots (default buffer_depth + 2) and
      the consumers' heartbeat; unset, BATCHCAST_* variables or the config file apply.
    **options: further Batchcast options a Producer reads (start_epoch, start_batch,
      late_join_window, join_mid_epoch, ...; docs/configuration.md). An option that
      configures the native decode pipeline (threads, cache, ...), set here or by a
      BATCHCAST_* variable, is refused: a Producer runs no decode pipeline.
    """

    def __init__(self, iterable, *, epochs=1, consumers=1, batch_size=None, max_batch_size=None,
                 samples_per_epoch=None, sample_shape=None, dtype=None, buffer_depth=None,
                 ring_slots=None, address=None, heartbeat_ms=None, end_when_empty=True,
                 join_timeout=None, telemetry=None, rank=None, run_name=None, ragged=None,
                 **options):
        first = None
        specs = []
        if ragged is not None and not isinstance(ragged, dict):
            raise InvalidArgumentError(
                f"producer: ragged={ragged!r}; give a dict {{tensor name: values budget}}, "
                "e.g. ragged={'tokens': '8m'}")
        if sample_shape is None or dtype is None or ragged:
            it = iter(iterable)
            item = next(it, _END)
            if item is _END:
                raise InvalidArgumentError("producer: the iterable yielded no batch")
            first = (it, item)
            images, labels, _, named = _split(item)
            batch_size = batch_size or getattr(iterable, "batch_size", None) or len(labels)
            specs = _tensor_specs(named, ragged, batch_size)
            if images is None:  # named tensors only
                sample_shape, dtype = sample_shape or (), dtype or "uint8"
            else:
                shape, dt = _sample_layout(images)
                sample_shape = sample_shape or shape
                dtype = dtype or dt
        sample_shape = tuple(int(d) for d in sample_shape)
        if sample_shape:
            sample_shape = (1,) * (3 - len(sample_shape)) + sample_shape
        if batch_size is None:
            batch_size = getattr(iterable, "batch_size", None)
        if not batch_size:
            raise InvalidArgumentError("producer: batch_size is unknown; pass batch_size=...")
        if samples_per_epoch is None:
            samples_per_epoch = _epoch_samples(iterable, batch_size)
        self._feed = _Feed(iterable, first, specs)
        opts = dict(options, epochs=int(epochs), telemetry=telemetry, run_name=run_name,
                    ring_slots=ring_slots, heartbeat_ms=heartbeat_ms, buffer_depth=buffer_depth)
        self._p = _bc._Producer(self._feed, list(sample_shape), dtype, int(batch_size),
                                int(samples_per_epoch), int(max_batch_size or batch_size),
                                address or "", options=opts,
                                rank=_env_rank() if rank is None else int(rank),
                                tensors=specs, consumers=int(consumers),
                                end_when_empty=bool(end_when_empty),
                                join_timeout_ms=-1 if join_timeout is None
                                else int(float(join_timeout) * 1000))
        self.address = self._p.address
        self.batch_size = int(batch_size)
        self._thread = None
        self._error = None
        self._stats = None

    def run(self):
        """Publishes every epoch, then ends the stream. Returns the statistics. An error of
        the iterable (KeyboardInterrupt too) fails the stream for its consumers and is raised
        here."""
        self._stats = self._p.run()
        return self._stats

    def start(self):
        """Runs run() on a background thread; join() waits for it and raises its error."""
        def body():
            try:
                self.run()
            except BaseException as e:  # noqa: BLE001 (re-raised by join)
                self._error = e
        self._thread = threading.Thread(target=body, name="batchcast-producer", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout=None):
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        if self._error is not None:
            raise self._error
        return True

    def stats(self):
        return self._p.stats()
