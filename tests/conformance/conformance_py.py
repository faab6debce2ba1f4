# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""The Python front doors in the front-door conformance test (conformance.py):

  conformance_py.py leader DATASET EXPECT SCENARIO_JSON      batchcast.Leader
  conformance_py.py producer DATASET EXPECT SCENARIO_JSON    batchcast.Producer relaying a
      batchcast.Consumer of a batchcast.Leader in this process (batch = the producer batch,
      with its sample ids): its consumers must see the native leader's batches exactly, the
      late joiner's replay coming from the Producer's kept copies
  conformance_py.py refuse-leader|refuse-producer|refuse-consumer DATASET KEYS_JSON VALUES_JSON
      every option of KEYS set as a keyword argument must be refused, naming the option and
      the front door

Leaders print "ready ADDRESS" once they listen.
"""
import json
import sys

import numpy as np

import batchcast


def kwargs_of(words):
    """["--seed", "11", "--flip", ...] -> {"seed": "11", "flip": True, ...}."""
    out, i = {}, 0
    while i < len(words):
        key = words[i][2:].replace("-", "_")
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            out[key] = words[i + 1]
            i += 2
        else:
            out[key] = True
            i += 1
    return out


def leader(dataset, expect, opts):
    l = batchcast.Leader(dataset, consumers=expect, **opts)
    print("ready", l.address, flush=True)
    l.wait()


class Relay:
    """One epoch of the upstream consumer per iter(), as (images, labels, sample ids)."""
    batch_size = 8

    def __init__(self, consumer):
        self.consumer = consumer

    def __iter__(self):
        for images, labels, info in self.consumer:
            yield images, labels, np.asarray(info.sample_ids, dtype=np.int64)


def producer(dataset, expect, opts):
    up = batchcast.Leader(dataset, consumers=1, **opts)
    c = batchcast.Consumer(up.address, batch_size=8, epochs=int(opts["epochs"]),
                           seed=opts["seed"], with_info=True, output="numpy")
    p = batchcast.Producer(Relay(c), epochs=int(opts["epochs"]), consumers=expect, batch_size=8,
                           max_batch_size=8, samples_per_epoch=60,
                           late_join_window=opts["late_join_window"],
                           heartbeat_ms=opts["heartbeat_ms"])
    print("ready", p.address, flush=True)
    p.run()
    c.close()
    up.wait()


def refuse(door, dataset, keys, values):
    images, labels = np.zeros((2, 3, 4, 4), np.uint8), np.zeros(2, np.int64)
    make = {
        "leader": lambda kw: batchcast.Leader(dataset, **kw),
        "producer": lambda kw: batchcast.Producer([(images, labels)], **kw),
        "consumer": lambda kw: batchcast.Consumer("bc-conformance-nobody", connect_timeout=0,
                                                  **kw),
    }[door]
    name = {"leader": "batchcast.Leader", "producer": "batchcast.Producer",
            "consumer": "batchcast.Consumer"}[door]
    # Keyword arguments of the front door's own with the name of an option are its own
    # settings, not the option (batchcast.Producer's dtype is the batches' image dtype).
    own = {"producer": {"dtype", "address", "rank"}, "leader": {"address", "rank"},
           "consumer": {"rank"}}[door]
    probed, bad = [], []
    for key in keys:
        if key in own:
            continue
        try:
            make({key: values[key]})
            bad.append(f"{key}: accepted")
        except batchcast.InvalidArgumentError as e:
            if f"option '{key}'" not in str(e) or name not in str(e):
                bad.append(f"{key}: {e}")
        except Exception as e:  # noqa: BLE001 (any other error is a wrong refusal)
            bad.append(f"{key}: {type(e).__name__}: {e}")
        probed.append(key)
    if bad:
        print("not refused as the table says:\n  " + "\n  ".join(bad))
        return 1
    print(f"{len(probed)} options refused ({', '.join(probed)})")
    return 0


def main():
    mode, dataset = sys.argv[1], sys.argv[2]
    if mode.startswith("refuse-"):
        return refuse(mode[7:], dataset, json.loads(sys.argv[3]), json.loads(sys.argv[4]))
    expect, opts = int(sys.argv[3]), kwargs_of(json.loads(sys.argv[4]))
    {"leader": leader, "producer": producer}[mode](dataset, expect, opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
