# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""A native leader process: prints {"address"} first, then {"stats"} at the end.

usage: leader_helper.py DATASET EPOCHS CONSUMERS MAX_BATCH [key=value options...]
"""
import json
import sys

import batchcast


def main():
    dataset, epochs, consumers, max_batch = sys.argv[1:5]
    opts = dict(a.split("=", 1) for a in sys.argv[5:])
    leader = batchcast.Leader(dataset, consumers=int(consumers), max_batch_size=int(max_batch),
                              epochs=int(epochs), batch_size=int(max_batch), **opts)
    print(json.dumps({"address": leader.address}), flush=True)
    leader.wait()
    print(json.dumps({"stats": leader.stats()}), flush=True)


if __name__ == "__main__":
    main()
