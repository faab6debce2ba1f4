"""A Python trainer started by batchcast-run: batchcast.Consumer() with no address finds the
node leader through BATCHCAST_ADDRESS and its rank through RANK, as the launcher exports them.
Checks every sample id arrives exactly once per epoch (plus the reported fill repeats)."""
import collections
import os
import sys

import batchcast

def say(line):  # one write(2) per line: several trainers share the launcher's output
    os.write(1, (line + "\n").encode())


samples, epochs = int(sys.argv[1]), int(sys.argv[2])
rank = os.environ["RANK"]
consumer = batchcast.Consumer(batch_size=int(sys.argv[3]), epochs=epochs, with_info=True)
ok = True
for epoch in range(epochs):
    seen = collections.Counter()
    repeats = 0
    for images, labels, info in consumer:
        seen.update(int(i) for i in info.sample_ids.tolist())
        repeats += info.repeats
        assert images.shape[0] == labels.shape[0] == len(info.sample_ids)
    extra = sum(seen.values()) - len(seen)
    if len(seen) != samples or extra != repeats or min(seen) != 0 or max(seen) != samples - 1:
        say(f"trainer-result RANK={rank} epoch={epoch} distinct={len(seen)} extra={extra} "
            f"repeats={repeats}: WRONG")
        ok = False
say(f"python-trainer-result RANK={rank} exactly_once={'ok' if ok else 'FAILED'} epochs={epochs}")
sys.exit(0 if ok else 1)
