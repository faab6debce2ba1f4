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


def _split(item):
    """(images, labels, ids, named) as numpy arrays (views of torch tensors, no copy). A dict
    batch names its tensors: "labels" (required), "images" and "sample_ids" (optional), and
    any further tensor, which reaches consumers under its name (docs/python.md)."""
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
        named = {k: _as_array(v, f"tensor '{k}'") for k, v in item.items()
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


def _tensor_specs(named):
    """[(name, dtype, per-sample shape)] of a batch's named tensors."""
    return [(k, a.dtype.name, tuple(int(d) for d in a.shape[1:])) for k, a in named.items()]


def _named_arrays(named, specs):
    """The batch's named tensors in the order of the first batch's, checked against it."""
    if sorted(named) != sorted(s[0] for s in specs):
        raise InvalidArgumentError(
            f"producer: a batch with the tensors {sorted(named)}; every batch must have the "
            f"first batch's {sorted(s[0] for s in specs)}")
    out = []
    for name, dtype, _ in specs:
        a = named[name]
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

    def _begin(self, epoch):
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
        images, labels, ids, named = _split(item)
        return (images, labels, ids, _named_arrays(named, self._specs))


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
                 join_timeout=None, telemetry=None, rank=None, run_name=None, **options):
        first = None
        specs = []
        if sample_shape is None or dtype is None:
            it = iter(iterable)
            item = next(it, _END)
            if item is _END:
                raise InvalidArgumentError("producer: the iterable yielded no batch")
            first = (it, item)
            images, labels, _, named = _split(item)
            specs = _tensor_specs(named)
            if images is None:  # named tensors only
                sample_shape, dtype = (), "uint8"
            else:
                shape, dt = _sample_layout(images)
                sample_shape = sample_shape or shape
                dtype = dtype or dt
            batch_size = batch_size or getattr(iterable, "batch_size", None) or len(labels)
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
