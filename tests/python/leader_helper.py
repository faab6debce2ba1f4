# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""A native leader process: prints {"address"} first, then {"stats"} at the end.

usage: leader_helper.py DATASET EPOCHS CONSUMERS MAX_BATCH [key=value options...]
  expect_lost=N: N consumers are expected to die (wait() must report exactly them)
"""
import json
import sys

import batchcast


def main():
    dataset, epochs, consumers, max_batch = sys.argv[1:5]
    opts = dict(a.split("=", 1) for a in sys.argv[5:])
    expect_lost = int(opts.pop("expect_lost", 0))
    leader = batchcast.Leader(dataset, consumers=int(consumers), max_batch_size=int(max_batch),
                              epochs=int(epochs), batch_size=int(max_batch), **opts)
    print(json.dumps({"address": leader.address}), flush=True)
    if expect_lost:
        try:
            leader.wait()
            raise AssertionError(f"wait() reported no lost consumer, {expect_lost} expected")
        except batchcast.UnavailableError as e:
            assert f"{expect_lost} consumer(s) were lost" in str(e), str(e)
    else:
        leader.wait()
    print(json.dumps({"stats": leader.stats()}), flush=True)


if __name__ == "__main__":
    main()
