# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""One trial of the telemetry sweep (telemetry_sweep_test.py): attaches to a loader, trains
EPOCHS epochs with a fixed amount of numpy work per batch, records into the run directory and
checks that it saw every sample exactly once per epoch. Prints `attached` once attached and
then waits for a line on stdin (the test starts all trials together, so that the later ones
join within the late-join window), a line per batch (`batch E I`, flushed: the test kills one
trial at a chosen batch) and at the end a JSON line.

    telemetry_sweep_trial.py ADDRESS NAME EPOCHS BATCH SAMPLES RUN_DIR WORK
"""
import json
import sys

import numpy as np

import batchcast


def main():
    address, name, epochs, batch, samples, run_dir, work = sys.argv[1:8]
    epochs, batch, samples, work = int(epochs), int(batch), int(samples), int(work)
    rng = np.random.default_rng(len(name))
    weights = rng.standard_normal((512, 512)).astype(np.float32) / 32
    loader = batchcast.Consumer(address, batch_size=batch, epochs=epochs, name=name,
                                run_name=name, output="numpy", with_info=True,
                                telemetry=f"dir:{run_dir}")
    print("attached", flush=True)
    sys.stdin.readline()  # go
    seen = []
    for _ in range(epochs):  # each iter() is one epoch
        counts = np.zeros(samples, np.int64)
        for images, labels, info in loader:
            print(f"batch {info.epoch} {info.index}", flush=True)
            fresh = np.asarray(info.sample_ids)[:len(labels) - info.repeats]
            np.add.at(counts, fresh, 1)
            x = np.asarray(images, dtype=np.float32).reshape(len(labels), -1)[:, :512] / 255
            for _ in range(work):  # the "training step": the same work per batch in every trial
                x = np.tanh(x @ weights)
        seen.append(counts)
    loader.close()  # writes this trial's telemetry file; raises if it cannot
    print(json.dumps({"name": name, "epochs": len(seen),
                      "exactly_once": all(bool((c == 1).all()) for c in seen),
                      "samples": int(sum(int(c.sum()) for c in seen))}), flush=True)


if __name__ == "__main__":
    main()
