# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Batchcast for PyTorch: one leader per node decodes each batch once, every trainer on the
node gets it zero-copy.

    train_loader = batchcast.Consumer(batch_size=64)     # was: DataLoader(dataset, 64, ...)
    for epoch in range(epochs):
        for images, labels in train_loader:               # torch tensors viewing shared memory
            ...

* ``Consumer``  iterates one epoch per ``iter()``, like a DataLoader (see docs/python.md).
* ``Producer``  publishes batches from any Python iterable (e.g. a DataLoader) to consumers.
* ``Leader``    runs the native C++ decode pipeline as the stream's source in this process.

Tensors cross from C++ through DLPack: this module never links libtorch.
"""

import sys
import threading
from collections import namedtuple

import numpy as np

from . import _batchcast as _bc
from ._version import __version__  # the CMake project() version

__all__ = ["__version__", "Consumer", "Producer", "Leader", "Info", "Error", "SharedBatchArray",
           "Ragged", "resolve_options"]


# --- errors: every C++ Status becomes one of these, with the C++ message unchanged ---
class Error(RuntimeError):
    """A Batchcast error; ``code`` is the C++ StatusCode name."""
    code = "internal error"


class InvalidArgumentError(Error, ValueError):
    code = "invalid argument"


class NotFoundError(Error, FileNotFoundError):
    code = "not found"


class IoError(Error, OSError):
    code = "i/o error"


class CorruptDataError(Error, ValueError):
    code = "corrupt data"


class OutOfRangeError(Error, IndexError):
    code = "out of range"


class ResourceExhaustedError(Error):
    code = "resource exhausted"


class UnavailableError(Error, ConnectionError):
    code = "unavailable"


class FailedPreconditionError(Error):
    code = "failed precondition"


class PermissionDeniedError(Error, PermissionError):
    code = "permission denied"


class DeadlineExceededError(Error, TimeoutError):
    code = "deadline exceeded"


class CancelledError(Error):
    code = "cancelled"


class InternalError(Error):
    code = "internal error"


_bc._set_error_classes({c.code: c for c in (
    InvalidArgumentError, NotFoundError, IoError, CorruptDataError, OutOfRangeError,
    ResourceExhaustedError, UnavailableError, FailedPreconditionError, PermissionDeniedError,
    DeadlineExceededError, CancelledError, InternalError)})
__all__ += [c.__name__ for c in Error.__subclasses__()]

# Per-batch metadata when a Consumer is created with with_info=True.
Info = namedtuple("Info", "epoch index lr_factor sample_ids repeats producer_seq producer_batch "
                          "last_in_epoch image_size wait_ns handoff_ns")

_UNTIL_STREAM_ENDS = 1 << 30  # epochs for a consumer that follows the leader to the end


def resolve_options(**options):
    """The resolved option registry (defaults < file < BATCHCAST_* env < arguments), as JSON."""
    return _bc.resolve_options(options)


def _from_dlpack():
    from torch.utils.dlpack import from_dlpack  # imported on first use: torch is optional
    return from_dlpack


def _from_numpy():
    from torch import from_numpy  # writable=True: tensors over the private numpy copies
    return from_numpy


_READ_ONLY_HINT = (
    "batchcast: this array views a shared batch (read-only: every trainer on the node reads "
    "it); copy it before modifying in place, e.g. x = np.array(view), or create the Consumer "
    "with writable=True for private copies")


_HELD_HINT = (
    "In a `for images, labels in loader` loop the previous batch is still held by the loop "
    "variables while the next one is fetched; that one is not counted against buffer_depth "
    "(the leader reserves it too), so keeping k batches across iterations needs "
    "buffer_depth >= k + 1, and list(loader) cannot hold a whole epoch of shared batches. "
    "Keep copies instead (images.clone(), np.array(view)), or create the Consumer with "
    "writable=True (private copies that hold no slot)")


def _held_message(message):
    """The C++ refusal (which names buffer_depth as the caller set it) and what to do."""
    return f"{message}. {_HELD_HINT}"


def _hint(err):
    return ValueError(f"{err} ({_READ_ONLY_HINT})")


def _in_place(name):
    base = getattr(np.ndarray, name)

    def op(self, other):
        try:
            return base(self, other)
        except ValueError as e:
            if self.flags.writeable:
                raise
            raise _hint(e) from None
    op.__name__ = name
    return op


class SharedBatchArray(np.ndarray):
    """A numpy view of a shared batch (output="numpy"): read-only, like a plain ndarray
    with ``writeable=False``, but a write says why and what to do instead. Results of
    arithmetic are plain ndarrays; slices stay read-only views."""

    def __setitem__(self, key, value):
        try:
            super().__setitem__(key, value)
        except ValueError as e:
            if self.flags.writeable:
                raise
            raise _hint(e) from None

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        # (numpy 2 passes return_scalar: a 0-d result of a reduction is wanted as a scalar)
        if not isinstance(arr, np.ndarray):
            return arr
        return arr[()] if return_scalar and arr.ndim == 0 else arr.view(np.ndarray)


for _name in ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
              "__ipow__", "__ilshift__", "__irshift__", "__iand__", "__ior__", "__ixor__",
              "__imatmul__"):
    setattr(SharedBatchArray, _name, _in_place(_name))
del _name


def _read_only_view(array):
    return array.view(SharedBatchArray)


def _read_only_copy(array):
    array.flags.writeable = False
    return array.view(SharedBatchArray)


class NamedBatch(dict):
    """A batch of named tensors: a dict whose missing "images" says why they are missing."""

    def __missing__(self, key):
        if key == "images":
            raise KeyError(
                "'images': the batch has no images: its producer does not publish them (a "
                "leader model stage with keep_input=false in option 'stage' reads them and "
                "publishes only its output; or a Producer's dict batches without images); it "
                f"has {', '.join(self)}")
        raise KeyError(key)


def _named_batch(images, labels, named, convert, nested=False):
    """{"images"?, "labels", name: tensor...} of a batch with named tensors. DLPack 0.6 has no
    bool, so bool tensors arrive as uint8 and are viewed back as bool here (no copy). A
    variable-length tensor ((values, dtype, offsets)) becomes a jagged nested tensor (torch,
    `nested`, where torch has them) or a Ragged."""
    out = NamedBatch() if images is None else NamedBatch(images=images)
    out["labels"] = labels
    for name, entry in named.items():
        t, dtype = entry[0], entry[1]
        if convert is not None:
            t = convert(t)
        if dtype == "bool" and not isinstance(t, np.ndarray):
            import torch
            t = t.view(torch.bool)
        if len(entry) == 3:
            offsets = entry[2] if convert is None else convert(entry[2])
            t = make_ragged(t, offsets, nested and not isinstance(t, np.ndarray))
        out[name] = t
    return out


# DataLoader arguments a Consumer cannot take, and what to write instead (the one-line swap
# keeps the rest of the script; these belong to the leader, which loads and decodes).
_WORKERS_HINT = ("the node's leader decodes for every trainer, so a Consumer has no workers: "
                 "drop it here and give the leader its threads (batchcast.Leader(..., threads=N), "
                 "batchcast-run/serve --threads=N)")
_DATALOADER_ARGS = {
    "num_workers": _WORKERS_HINT,
    "persistent_workers": _WORKERS_HINT + "; the stream itself persists across epochs",
    "prefetch_factor": "the Consumer prefetches up to buffer_depth batches: use buffer_depth=N",
    "worker_init_fn": _WORKERS_HINT,
    "multiprocessing_context": _WORKERS_HINT,
    "sampler": ("the leader orders the samples (its seed and shuffle options); for "
                "DistributedSampler's sharding use mode='shard' (rank and world_size from "
                "RANK/WORLD_SIZE, or rank=, world_size=)"),
    "batch_sampler": "the leader orders the samples; give batch_size=N (and drop_last) instead",
    "collate_fn": ("the leader collates (its transforms: image_size, crop, flip, normalize); "
                   "apply per-batch code of your own to the tensors the loop yields"),
    "generator": "the leader's seed option orders every epoch",
    "timeout": "use connect_timeout=ms for the wait for the leader",
}
_DATASET_HINT = ("the dataset belongs to the leader (batchcast.Leader(dataset, ...) or "
                 "batchcast.Producer(DataLoader(dataset, ...))); a Consumer takes the leader's "
                 "address")


def _refuse_dataloader_args(options):
    for key, hint in _DATALOADER_ARGS.items():
        if key in options:
            raise InvalidArgumentError(
                f"consumer: {key}={options[key]!r} is a DataLoader argument a batchcast.Consumer "
                f"does not take: {hint} (docs/python.md, 'DataLoader arguments')")


def _pin_memory_wanted(pin_memory, numpy_output):
    """pin_memory=True as a DataLoader does it: batches copied into pinned (page-locked) host
    memory for asynchronous .to(device, non_blocking=True) copies when an accelerator is
    present; without one, DataLoader's warning and unpinned batches."""
    if not pin_memory:
        return False
    if numpy_output:
        raise InvalidArgumentError(
            "consumer: pin_memory=True needs output='torch' (pinned memory is torch's)")
    import torch
    acc = getattr(torch, "accelerator", None)
    available = acc.is_available() if acc is not None else torch.cuda.is_available()
    if not available:
        import warnings
        warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then "
                      "device pinned memory won't be used.", stacklevel=3)
        return False
    return True


class _StreamSampler:
    """Consumer.sampler: set_epoch() of the DistributedSampler idiom."""

    def __init__(self, consumer):
        self._consumer = consumer

    def set_epoch(self, epoch):
        # The training loop counts its own epochs: after a late start or a resume replay those
        # are behind the stream's numbers (state_dict()["start_run_epoch"]).
        state = self._consumer.state_dict()
        at = state.get("start_run_epoch", state["start_epoch"])
        if int(epoch) < at:
            raise InvalidArgumentError(
                f"consumer: sampler.set_epoch({epoch}): this consumer is in its epoch {at} "
                f"(stream epoch {state['start_epoch']}), and the leader's stream does not go "
                "back; the leader orders every epoch (seed and epoch number), so set_epoch can "
                "be dropped")


# The consumers whose batches this process trains on, for the note an uncaught error gets.
_watched = None  # a weakref.WeakSet once the first batch was yielded
_ERROR_SIGNS = ("scalar type", "dtype", "shapes cannot be multiplied", "size mismatch",
                "must match the size", "Input type", "expected input", "Expected input",
                "same dtype", "but got", "sizes of tensors")


def _note_on_error(exc):
    """A note for an uncaught exception whose message looks like a dtype or size mismatch:
    what this process's batchcast batches are, and why they may differ from the DataLoader
    the Consumer replaced."""
    msg = str(exc)
    consumers = [c for c in list(_watched or ()) if c._first is not None]
    if not consumers or not any(sign in msg for sign in _ERROR_SIGNS):
        return None
    lines = [f"batchcast: this process trains on batchcast.Consumer batches: "
             f"{c.describe()}" + (f"; later batches are {c._changed[0]} "
                                  f"{list(c._changed[1])} per sample"
                                  if getattr(c, "_changed", None) else "")
             for c in consumers]
    lines.append(
        "batchcast: the leader applies the transforms (image_size, crop, flip, normalize): "
        "with normalize the images are float32 and already normalized, without it uint8 0..255; "
        "the batch size is the Consumer's batch_size (the last batch of an epoch may be "
        "partial). Make the script's conversion match, or give the leader the transforms the "
        "DataLoader had (docs/python.md, 'Before and after')")
    return "\n".join(lines)


def _watch(consumer):
    global _watched
    if _watched is None:
        import weakref
        _watched = weakref.WeakSet()
        _install_error_note()
    _watched.add(consumer)


def _install_error_note():
    previous = sys.excepthook

    def hook(kind, value, tb):
        try:
            note = _note_on_error(value)
        except Exception:  # the note must never hide the error itself
            note = None
        previous(kind, value, tb)
        if note:
            sys.stderr.write(note + "\n")
    sys.excepthook = hook


def _env_rank():
    """This process's rank from its launcher (RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK,
    SLURM_PROCID); -1 if none. Read in C++, where every front door reads the environment."""
    return _bc._launcher_rank()


class Consumer:
    """An iterable over the batches a Batchcast leader (native Leader, Producer, MPI runtime
    or service) publishes; a drop-in for a training DataLoader.

    Each ``iter()`` yields one epoch of ``(images, labels)`` torch tensors (or
    ``(images, labels, info)`` with ``with_info=True``); ``len()`` is the number of batches
    per epoch. Tensors view the leader's shared memory (no copy) and are read-only: every
    trainer on the node reads the same bytes, so transform out of place
    (``images.float() / 255``); an in-place write (``images.div_(255)``) ends the process
    with a message naming the shared batch, a numpy view raises ValueError. With
    ``writable=True`` each batch is a private copy instead (one memcpy per batch), which
    may be modified and kept freely. With ``release="on_free"`` (default) the slot is given
    back when the tensors are freed, so at most ``buffer_depth`` batches may be alive; with
    ``release="next"`` it is given back at the next iteration and the tensors must not be
    used after it (clone what you keep). ``close()`` (or ``del``, or the end of a ``with``
    block) stops delivery only: tensors still alive stay valid until they are freed.

    address: the leader's address; default $BATCHCAST_ADDRESS (set by the launcher), or,
      inside an MPI job with mpi4py imported, the node leader formed by the MPI runtime.
    epochs: epochs to consume; None follows the leader to the end of its stream.
    ragged: how a variable-length tensor of a dict batch (token sequences) arrives: "auto"
      (default) a jagged torch.nested tensor over the values and offsets (no copy) where torch
      has them (>= 2.3), else a ``batchcast.Ragged``; "pair" always a ``batchcast.Ragged``
      (``.values``, ``.offsets``; also with output="numpy").
    options: any option a consumer reads (batch_size, buffer_depth, carve_offset, heartbeat_ms,
      mode, rank, world_size, drop_last, start_epoch, ...); an option only the leader reads
      (dataset, threads, image_size, producer_batch, ...) is refused with InvalidArgumentError
      naming where it belongs.
    """

    def __init__(self, address=None, *, batch_size=None, buffer_depth=None, epochs=None,
                 release="on_free", with_info=False, output="torch", writable=False, rank=None,
                 name="", pin_memory=False, ragged="auto", **options):
        if address is not None and not isinstance(address, str):
            raise InvalidArgumentError(
                f"consumer: the first argument is the leader's address (a str), not "
                f"{type(address).__name__}: {_DATASET_HINT}")
        _refuse_dataloader_args(options)
        if release not in ("on_free", "next"):
            raise InvalidArgumentError(
                f"consumer: release='{release}' is not one of 'on_free', 'next'")
        if output not in ("torch", "numpy"):
            raise InvalidArgumentError(
                f"consumer: output='{output}' is not one of 'torch', 'numpy'")
        if ragged not in ("auto", "pair"):
            raise InvalidArgumentError(
                f"consumer: ragged='{ragged}' is not one of 'auto' (variable-length tensors as "
                "jagged torch.nested tensors where torch has them, else batchcast.Ragged) or "
                "'pair' (always batchcast.Ragged: values and offsets)")
        self._nested = ragged == "auto"
        opts = dict(options, batch_size=batch_size, buffer_depth=buffer_depth,
                    epochs=_UNTIL_STREAM_ENDS if epochs is None else epochs)
        self._with_info = with_info
        self._numpy = output == "numpy"
        self._copy = bool(writable)
        if self._numpy:
            self._convert = None if self._copy else _read_only_view
        else:
            self._convert = _from_numpy() if self._copy else _from_dlpack()
        self._pin = _pin_memory_wanted(pin_memory, self._numpy)
        self._ended = False
        self._peeked = None  # the raw copy of a peeked first batch, yielded again next
        self._first = None   # (dtype, per-sample shape, batch size) of the first batch
        self._broken = None  # the epoch a loop broke out of, skipped by the next iter()
        self._skipped = 0    # batches given back unread after breaks
        self.last_info = None
        address = address or _bc._leader_address()
        if not address:
            raise InvalidArgumentError(
                "consumer: no leader address: pass address=..., set BATCHCAST_ADDRESS (the "
                "launcher does), or start a batchcast.Leader / batchcast.Producer first")
        if rank is not None and opts.get("mode") == "shard":
            opts["rank"] = rank  # the data-parallel rank (default: RANK from the environment)
        rank = _env_rank() if rank is None else rank
        self._c = _bc._Consumer(address, opts, rank, name, release == "next")
        self.address = address

    def __len__(self):
        """Batches per epoch for this consumer's batch size (exact, from the stream)."""
        return self._c.batches_per_epoch()

    @property
    def sampler(self):
        """For ``loader.sampler.set_epoch(epoch)`` (the DistributedSampler idiom): the leader
        orders every epoch (its seed and the epoch number), so set_epoch has nothing to
        choose; it refuses an epoch this consumer has already passed (a shared stream does
        not go back)."""
        return _StreamSampler(self)

    def describe(self):
        """What this consumer's batches are: the first batch's images dtype and shape, and
        the batch size; "" before the first batch."""
        if self._first is None:
            return ""
        dtype, shape, n = self._first
        return (f"images {dtype} [{n}, {', '.join(map(str, shape))}] (batch_size={n}), as the "
                "leader's transforms made them")

    def __iter__(self):
        """One epoch: ends after the epoch's last batch, or at the end of the stream.

        The first batch of every ``iter()`` is a private copy (one memcpy per epoch) that holds
        no slot, and an iterator dropped right after its first batch is a peek: that batch
        is also the first one the next ``iter()`` yields. So ``images, labels =
        next(iter(loader))`` may be kept for any time, and the ``for`` loop that follows
        still gets the whole epoch (``len(loader)`` batches).

        When the epoch's last producer batches were entirely skipped as bad samples, no batch
        is marked last: the epoch ends at the first batch of the next one, which is kept
        (as a private copy) for the next ``iter()``."""
        return self._epoch()

    def _epoch(self):
        first = True
        epoch = None
        self._skip_broken_epoch()
        while True:
            if self._peeked is not None:
                # A fresh copy: the peek's own arrays stay the caller's.
                raw, self._peeked = self._private_copy(self._peeked), None
            elif self._ended:
                if first:
                    self._past_the_end()
                return
            else:
                raw = self._fetch(copy=first or self._copy)
                if raw is None:
                    if first:
                        self._past_the_end()
                    return
            if epoch is not None and raw[3].epoch != epoch:
                self._peeked = self._private_copy(raw)  # the next epoch's first batch
                return
            epoch = raw[3].epoch
            item, last = self._wrap(raw, private=first or self._copy)
            try:
                yield item
            except GeneratorExit:
                if first:
                    self._peeked = raw
                elif not last:
                    self._broken = epoch  # a break: the next iter() starts the next epoch
                raise
            del item  # while the next batch is fetched only the caller's variables hold this one
            first = False
            if last:
                return

    def _past_the_end(self):
        """iter() after the end of the stream: a `for epoch in range(E)` loop with more epochs
        than the stream has would train on nothing, so this raises FailedPreconditionError
        naming both epoch counts (the C++ consumer's answer to a batch asked for after the
        end, or its error after close())."""
        self._c.next(False, self._numpy, False)
        raise FailedPreconditionError(  # not reached: the C++ consumer refuses
            "consumer: iterated after the end of its stream")

    def _skip_broken_epoch(self):
        """After a loop broke out of epoch e (past its first batch), the rest of e is given
        back unread, so the next iter() starts at epoch e + 1 as a DataLoader's does."""
        epoch, self._broken = self._broken, None
        if epoch is None or self._peeked is not None:
            return
        while not self._ended:
            raw = self._fetch(copy=False)
            if raw is None:
                return
            if raw[3].epoch != epoch:
                self._peeked = self._private_copy(raw)
                return
            last = raw[3].last_in_epoch
            del raw  # given back before the next fetch: a loop variable may hold one more
            self._skipped += 1
            if last:
                return

    def _private_copy(self, raw):
        """`raw` (numpy arrays, or DLPack capsules of a shared batch) as new numpy arrays."""
        def copy(a):
            if a is None:
                return None
            if not isinstance(a, np.ndarray):  # a capsule: torch takes it, numpy copies it
                a = self._convert(a).numpy()
            return np.array(a)
        images, labels, ids, info, named = raw
        if named is not None:
            named = {k: (copy(e[0]), e[1], *map(copy, e[2:])) for k, e in named.items()}
        return copy(images), copy(labels), copy(ids), info, named

    def batches(self):
        """Every remaining batch of every epoch, without epoch boundaries (none once the
        stream is over)."""
        while self._peeked is not None or not self._ended:
            private = self._copy or self._peeked is not None
            if self._peeked is not None:
                raw, self._peeked = self._peeked, None
            else:
                raw = self._fetch(copy=self._copy)
                if raw is None:
                    return
            item, _ = self._wrap(raw, private)
            yield item
            del item

    def _fetch(self, copy):
        """(images, labels, ids, info) from C++, or None at the end of the stream."""
        try:
            r = self._c.next(self._with_info, self._numpy, copy)
        except FailedPreconditionError as e:
            if "unreleased batches" not in str(e):
                raise
            raise FailedPreconditionError(_held_message(str(e))) from None
        if r is None:
            self._ended = True
        return r

    def _wrap(self, raw, private):
        images, labels, ids, info, named = raw
        if private and self._numpy and not self._copy:
            convert = _read_only_copy  # numpy batches are read-only, copies or not
        else:
            convert = (_from_numpy() if private and not self._numpy else
                       None if private else self._convert)
        if convert is not None:
            images = convert(images) if images is not None else None
            labels = convert(labels)
            if ids is not None:
                ids = convert(ids)
        self.last_info = info
        if images is not None:
            self._check_first_use(images, info)
        if self._pin:
            images = images.pin_memory() if images is not None else None
            labels = labels.pin_memory()
        item = (images, labels)
        if named is not None:  # a batch of named tensors: a dict (docs/python.md)
            item = _named_batch(images, labels, named, convert, self._nested)
        if self._with_info:
            meta = Info(info.epoch, info.index, info.lr_factor, ids, info.repeats,
                        info.producer_seq, info.producer_batch, info.last_in_epoch,
                        info.image_size, info.wait_ns, info.handoff_ns)
            return (*item, meta) if named is None else (item, meta), info.last_in_epoch
        return item, info.last_in_epoch

    def _check_first_use(self, images, info):
        """Remembers the first batch's images dtype and per-sample shape; a later batch that
        differs (progressive resizing, a leader restarted with other transforms) is said once
        as a warning, and an uncaught error of the training step names both (_note_on_error)."""
        dtype = str(images.dtype).replace("torch.", "")
        shape = tuple(images.shape[1:])
        if self._first is None:
            self._first = (dtype, shape, int(images.shape[0]))
            _watch(self)
            return
        if (dtype, shape) != self._first[:2] and not getattr(self, "_told", False):
            self._told = True
            import warnings
            warnings.warn(
                f"batchcast.Consumer: the images of batch {info.index} of epoch {info.epoch} are "
                f"{dtype} {list(shape)} per sample, the first batch's were {self._first[0]} "
                f"{list(self._first[1])} (the leader's transforms changed: progressive resizing "
                "or another leader); code fixed to the first batch's size or dtype fails now",
                stacklevel=3)
            self._changed = (dtype, shape)

    def state_dict(self):
        """Where this consumer is in its stream: ``{"start_epoch": e, "start_batch": b}``, the
        batch the next iteration yields (a pending peek included). Save it with a checkpoint
        and resume with the same options plus these, on the leader and the consumer:
        ``Leader(..., **state)`` and ``Consumer(..., **state)`` deliver exactly the batches
        an uninterrupted run delivers from there (docs/python.md, "Resume"). After a
        service's resume replay moved the trial onto later stream epochs, the dict also has
        ``"start_run_epoch"``, the trial's own epoch there (``epochs - start_run_epoch`` of
        its epochs are left; docs/service.md, "Resuming a trial"); give it to the Consumer."""
        epoch, batch, run = self._c.position()
        if self._peeked is not None:
            info = self._peeked[3]
            # The position is after the peeked batch: one epoch further if that ended one.
            epoch, batch = info.epoch, info.index
            run -= 1 if info.last_in_epoch else 0
        elif self._broken is not None:  # the next iter() skips the rest of that epoch
            run += 1 if epoch == self._broken else 0
            epoch, batch = self._broken + 1, 0
        state = {"start_epoch": int(epoch), "start_batch": int(batch)}
        if int(run) != int(epoch):
            state["start_run_epoch"] = int(run)
        return state

    def load_state_dict(self, state):
        """Moves this consumer to a saved ``state_dict()``, like a resumable sampler's
        ``load_state_dict``: call it after creating the Consumer and before the first batch
        (``Consumer(...)`` then ``load_state_dict(state)`` is the same as
        ``Consumer(..., **state)``); the next iteration yields batch ``start_batch`` of epoch
        ``start_epoch``. The leader must be at or before that position (started with the same
        state, or a service that replays it). Loading the position the consumer is already at
        is a no-op at any time; any other position after the first batch is refused (a
        shared stream does not rewind or jump for one consumer): create a new Consumer."""
        keys = {"start_epoch", "start_batch"}
        if not isinstance(state, dict) or not keys <= set(state) <= keys | {"start_run_epoch"}:
            raise InvalidArgumentError(
                f"consumer: load_state_dict({state!r}): expected a dict with the keys "
                "'start_epoch' and 'start_batch' (and 'start_run_epoch' after a service moved "
                "the trial), as state_dict() returns")
        if not getattr(self, "_closed", False) and state == self.state_dict():
            return
        self._c.start_at(int(state["start_epoch"]), int(state["start_batch"]),
                         int(state.get("start_run_epoch", -1)))

    @property
    def ended(self):
        """True once the stream (or this consumer's epochs) is over: after the last batch of
        its last epoch (or close()); iterating further raises FailedPreconditionError."""
        return (self._ended or self._c.finished()) and self._peeked is None

    def stats(self):
        """This consumer's counters: batches, samples, repeats, wait_ns, epochs_completed,
        repeats_per_epoch, and skipped_after_break (batches of broken-off epochs given back
        unread)."""
        d = self._c.stats()
        d["skipped_after_break"] = self._skipped
        return d

    @property
    def telemetry_summary(self):
        """The end-of-run summary and diagnosis this consumer's telemetry printed at close()
        (with ``telemetry=...``; "" before or when off)."""
        return self._c.telemetry_summary()

    def record(self, name, value):
        """Appends (now, value) to the named series ``name`` of this consumer's telemetry,
        e.g. ``record("model/resnet/loss", loss.item())`` once per step: written to every
        telemetry output (docs/telemetry.md, "Named series"). Does nothing with telemetry off;
        a bad name (segments of letters, digits, ``_.-`` between ``/``) raises."""
        self._c.record(str(name), float(value))

    def close(self):
        """Leaves the stream; the leader and the other consumers go on. Tensors already
        taken stay valid; any later use of this Consumer raises FailedPreconditionError."""
        self._peeked = self._broken = None  # nothing is handed out after close()
        self._closed = True
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Leader:
    """The native C++ pipeline (HDF5 -> decode -> transform -> collate) as the stream's
    source, run on a background thread of this process. Consumers (any process on this
    node) attach to ``leader.address``.

    consumers: joins to wait for before the first batch (later joiners start at an epoch).
    max_batch_size: largest consumer batch_size admitted (default: batch_size).
    rank: this process's rank in telemetry (default: from the MPI/Slurm environment).
    options: Batchcast options, e.g. dataset=..., epochs=..., seed=..., producer_batch=...,
      telemetry="json=leader.json" (files and the end-of-run summary, written when the
      stream is over; docs/python.md, "Telemetry").
    """

    def __init__(self, dataset=None, *, consumers=1, max_batch_size=None, address=None,
                 end_when_empty=True, join_timeout=120.0, rank=None, **options):
        opts = dict(options, dataset=dataset)
        self._l = _bc._Leader(opts, consumers, max_batch_size or 0, address or "",
                              end_when_empty, int(join_timeout * 1000),
                              _env_rank() if rank is None else int(rank))
        self.address = self._l.address

    def wait(self, timeout=None):
        """Blocks until the stream is complete (True) or timeout seconds pass (False);
        raises the leader's error."""
        return self._l.wait(-1.0 if timeout is None else float(timeout))

    def stats(self):
        """What the C++ leader knows: the slot writer's counters (producer_batches,
        samples_produced/decoded/skipped, slot_wait_ns, fill_ns, ...), late joins and
        replays, ``consumers`` (one dict per consumer entry: state, rank, name, pid,
        batch_size, buffer_depth, batches, wait_ns), ``done``/``status`` and, once the
        stream is over with ``telemetry=...`` on, ``telemetry_summary``."""
        return self._l.stats()

    def close(self):
        """Stops the stream if it is still running (consumers see an error)."""
        self._l.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


from .producer import Producer  # noqa: E402  (needs the classes above)
from .ragged import Ragged, make_ragged  # noqa: E402
