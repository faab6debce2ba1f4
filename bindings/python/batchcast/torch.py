# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""batchcast.torch: the stream as a ``torch.utils.data.IterableDataset``, for code that
expects a Dataset (PyTorch Lightning's ``train_dataloader``, trainer frameworks).

    dataset = batchcast.torch.StreamDataset(batch_size=64)
    loader = DataLoader(dataset, batch_size=None)      # the stream is already batched

Each element is one batch ``(images, labels)`` (as ``batchcast.Consumer`` yields it); one
``iter()`` is one epoch. The Consumer is created on first use (``iter()`` or ``len()``), so
the dataset may be built before the leader runs. DataLoader workers are refused with a
message: the leader decodes already, and a worker would be a second trainer of its own.
"""

import torch.utils.data

from . import Consumer, InvalidArgumentError


class StreamDataset(torch.utils.data.IterableDataset):
    """An IterableDataset over a Batchcast stream: each item is a batch.

    consumer_options: the arguments of ``batchcast.Consumer`` (address, batch_size,
    buffer_depth, epochs, with_info, ...); the Consumer is created on first use.
    """

    def __init__(self, **consumer_options):
        super().__init__()
        self._options = consumer_options
        self._consumer = None

    @property
    def consumer(self):
        """The Consumer (created on first use)."""
        if self._consumer is None:
            self._consumer = Consumer(**self._options)
        return self._consumer

    def __len__(self):
        """Batches per epoch (DataLoader(batch_size=None) reports it as its len())."""
        return len(self.consumer)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None:
            raise InvalidArgumentError(
                f"StreamDataset: iterated in a DataLoader worker (num_workers="
                f"{info.num_workers}); the leader decodes the batches already and a worker "
                "would attach as a trainer of its own. Use DataLoader(dataset, "
                "batch_size=None, num_workers=0)")
        return iter(self.consumer)

    def close(self):
        if self._consumer is not None:
            self._consumer.close()
