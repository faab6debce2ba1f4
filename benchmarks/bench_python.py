# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""`make bench B=python`: the Python bindings measured side by side.

1. python_over_cpp: samples/s of one Python Consumer (torch tensors through DLPack) over
   one C++ Consumer (bench_python_consumer) on the same stream definition: a native leader
   process over Fashion-MNIST (raw, 60000 samples, 2 epochs, batch 64). Both touch every
   batch the same way (one pixel per sample and every label). Also the consumer's own
   busy time per batch (elapsed minus time blocked waiting for the leader).
2. producer_cpu_ratio: CPU-seconds of a Python Producer wrapping a DataLoader (PNG decode
   with PIL, float32 transform, 1 worker, shuffle) serving 4 trainer processes, over the
   CPU-seconds of 4 trainers each running that DataLoader themselves. Each process reports
   the CPU of its working phase (itself and its DataLoader workers), after imports.

Prints a table, then one JSON line last. Usage:
  bench_python.py --build BUILD [--reps 3] [--samples 6000] [--baseline BUILD0] [--consumer-only]
With --baseline, the Python consumer of BUILD0 (e.g. the previous commit) runs against the
same leader definition in the same repetitions, for a before/after of the per-batch cost.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)


def cpu_now():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


# ---------------------------------------------------------------- roles (child processes)
def role_leader(dataset, epochs, batch, limit):
    import batchcast
    leader = batchcast.Leader(dataset, consumers=1, epochs=int(epochs), batch_size=int(batch),
                              limit_samples=int(limit))
    print(json.dumps({"address": leader.address}), flush=True)
    leader.wait()


def role_pyconsumer(address, batch):
    import batchcast
    c = batchcast.Consumer(address, batch_size=int(batch))
    samples = checksum = 0
    t0 = None
    while not c.ended:  # the usual loop: one `for` per epoch
        for images, labels in c:
            if t0 is None:  # from the first batch on (waiting for it is the leader's start-up)
                t0 = time.perf_counter()
                wait0 = c.stats()["wait_ns"]
            checksum += int(images[:, 0, 0, 0].sum()) + int(labels.sum())
            samples += labels.shape[0]
    secs = time.perf_counter() - t0
    print(json.dumps({"samples": samples, "seconds": secs, "wait_ns": c.stats()["wait_ns"] - wait0,
                      "checksum": checksum}), flush=True)


def make_loader(h5, limit, batch, workers, seed):
    import io

    import h5py
    import numpy as np
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader, Dataset

    class PngImages(Dataset):
        def __init__(self):
            self.f = None

        def __len__(self):
            return limit

        def __getitem__(self, i):
            if self.f is None:
                self.f = h5py.File(h5, "r")
            if "sample_offsets" in self.f:  # layout version 2: bytes + index
                o, n = int(self.f["sample_offsets"][i]), int(self.f["sample_lengths"][i])
                png = self.f["images"][o:o + n].tobytes()
            else:  # layout version 1: vlen
                png = self.f["images"][i].tobytes()
            img = np.asarray(Image.open(io.BytesIO(png)), dtype=np.float32) / 255.0
            return torch.from_numpy(img).unsqueeze(0), int(self.f["labels"][i])

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    return DataLoader(PngImages(), batch_size=batch, shuffle=True, num_workers=workers)


def role_direct(h5, limit, batch, workers):
    loader = make_loader(h5, int(limit), int(batch), int(workers), 0)
    c0 = cpu_now()
    samples = 0
    checksum = 0.0
    for images, labels in loader:
        checksum += float(images[:, 0, 14, 14].sum()) + int(labels.sum())
        samples += labels.shape[0]
    print(json.dumps({"samples": samples, "cpu": cpu_now() - c0}), flush=True)


def role_producer(h5, limit, batch, workers, consumers):
    import batchcast
    loader = make_loader(h5, int(limit), int(batch), int(workers), 0)
    c0 = cpu_now()
    p = batchcast.Producer(loader, consumers=int(consumers))
    print(json.dumps({"address": p.address}), flush=True)
    p.run()
    del p
    print(json.dumps({"cpu": cpu_now() - c0}), flush=True)


def role_shared(address, batch):
    import batchcast
    c = batchcast.Consumer(address, batch_size=int(batch))
    c0 = cpu_now()
    samples = 0
    checksum = 0.0
    for images, labels in c:
        checksum += float(images[:, 0, 14, 14].sum()) + int(labels.sum())
        samples += labels.shape[0]
    print(json.dumps({"samples": samples, "cpu": cpu_now() - c0}), flush=True)


ROLES = {"leader": role_leader, "pyconsumer": role_pyconsumer, "direct": role_direct,
         "producer": role_producer, "shared": role_shared}


# ---------------------------------------------------------------- driver
def spawn(*args, python_dir=None):
    env = dict(os.environ)
    if python_dir:  # another build's batchcast package (--baseline)
        env["PYTHONPATH"] = python_dir
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", *map(str, args)],
                            stdout=subprocess.PIPE, text=True, env=env)


def spawn_cmd(cmd):
    return subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, text=True)


def last_json(proc):
    out, _ = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"bench_python: {proc.args} failed with {proc.returncode}")
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def first_json(proc):
    return json.loads(proc.stdout.readline())


def consumer_rate(kind, build, train, batch, limit, python_dir=None):
    leader = spawn("leader", train, 2, batch, limit)
    address = first_json(leader)["address"]
    if kind == "cpp":
        c = spawn_cmd([os.path.join(build, "benchmarks", "bench_python_consumer"), address, batch])
    else:
        c = spawn("pyconsumer", address, batch, python_dir=python_dir)
    r = last_json(c)
    leader.wait(timeout=900)
    busy = r["seconds"] - r["wait_ns"] * 1e-9
    batches = r["samples"] / batch
    return r["samples"] / r["seconds"], busy / batches * 1e6


def producer_cpu(png, limit, batch, workers, trainers):
    direct = [spawn("direct", png, limit, batch, workers) for _ in range(trainers)]
    t0 = time.perf_counter()
    rd = [last_json(p) for p in direct]
    wall_direct = time.perf_counter() - t0
    producer = spawn("producer", png, limit, batch, workers, trainers)
    address = first_json(producer)["address"]
    t0 = time.perf_counter()
    shared = [spawn("shared", address, batch) for _ in range(trainers)]
    rs = [last_json(p) for p in shared]
    rp = last_json(producer)
    wall_shared = time.perf_counter() - t0
    cpu_direct = sum(r["cpu"] for r in rd)
    cpu_shared = sum(r["cpu"] for r in rs) + rp["cpu"]
    delivered = sum(r["samples"] for r in rs)
    assert delivered == sum(r["samples"] for r in rd) == trainers * limit, (rs, rd)
    return cpu_shared / cpu_direct, cpu_shared, cpu_direct, \
        delivered / wall_shared, delivered / wall_direct


def summarize(v):
    return min(v), statistics.median(v), max(v)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--role":
        ROLES[sys.argv[2]](*sys.argv[3:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=6000, help="PNG samples per epoch (part 2)")
    ap.add_argument("--data", default=None, help="Fashion-MNIST dir (default BUILD/data)")
    ap.add_argument("--baseline", default=None,
                    help="another build dir: its Python consumer is measured too, side by side "
                         "(e.g. a build of the previous commit)")
    ap.add_argument("--consumer-only", action="store_true", help="skip part 2 (Producer CPU)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    data = a.data or os.path.join(build, "data")
    train = os.path.join(data, "fashion-mnist-train.h5")
    png = os.path.join(data, "fashion-mnist-train-png.h5")
    if not (os.path.exists(train) and os.path.exists(png)):
        subprocess.run(["bash", os.path.join(SOURCE, "scripts", "fashion_mnist.sh"), data,
                        os.path.join(build, "bin", "batchcast")], check=True,
                       stdout=subprocess.DEVNULL)
    sys.path.insert(0, os.path.join(build, "python"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.join(build, "python"), os.environ.get("PYTHONPATH")) if p)

    batch, limit, trainers = 64, 60000, 4
    rows = {k: [] for k in ("cpp_rate", "py_rate", "ratio", "cpp_busy", "py_busy",
                            "cpu_ratio", "cpu_shared", "cpu_direct", "rate_shared",
                            "rate_direct", "py_busy_base", "py_rate_base")}
    base_dir = os.path.join(os.path.abspath(a.baseline), "python") if a.baseline else None
    for _ in range(a.reps):
        if base_dir:  # interleaved with the measured build, same leader, same loop
            rate, busy = consumer_rate("py", build, train, batch, limit, python_dir=base_dir)
            rows["py_rate_base"].append(rate)
            rows["py_busy_base"].append(busy)
        cpp_rate, cpp_busy = consumer_rate("cpp", build, train, batch, limit)
        py_rate, py_busy = consumer_rate("py", build, train, batch, limit)
        rows["cpp_rate"].append(cpp_rate)
        rows["py_rate"].append(py_rate)
        rows["ratio"].append(py_rate / cpp_rate)
        rows["cpp_busy"].append(cpp_busy)
        rows["py_busy"].append(py_busy)
        if a.consumer_only:
            continue
        ratio, cs, cd, rs, rd = producer_cpu(png, a.samples, 100, 1, trainers)
        rows["cpu_ratio"].append(ratio)
        rows["cpu_shared"].append(cs)
        rows["cpu_direct"].append(cd)
        rows["rate_shared"].append(rs)
        rows["rate_direct"].append(rd)

    table = [
        ("C++ consumer samples/s (native leader, FMNIST raw, b=64)", "cpp_rate", "samples/s"),
        ("Python consumer samples/s (same stream)", "py_rate", "samples/s"),
        ("python_over_cpp", "ratio", "x"),
        ("C++ consumer busy time per batch", "cpp_busy", "us"),
        ("Python consumer busy time per batch", "py_busy", "us"),
        (f"CPU: Producer(DataLoader) + {trainers} trainers", "cpu_shared", "cpu-s"),
        (f"CPU: {trainers} trainers with own DataLoader", "cpu_direct", "cpu-s"),
        ("producer_cpu_ratio", "cpu_ratio", "x"),
        (f"aggregate samples/s, shared ({trainers} trainers)", "rate_shared", "samples/s"),
        (f"aggregate samples/s, independent ({trainers} trainers)", "rate_direct", "samples/s"),
    ]
    print(f"\nPython bindings ({a.reps} repetitions; PNG DataLoader: {a.samples} samples, "
          "batch 100, 1 worker)")
    print(f"{'metric':<58} {'min':>10} {'median':>10} {'max':>10}  unit")
    print("-" * 100)
    if base_dir:
        table[5:5] = [("Python consumer samples/s, --baseline build", "py_rate_base", "samples/s"),
                      ("Python consumer busy time per batch, --baseline build", "py_busy_base",
                       "us")]
    for label, key, unit in table:
        if not rows[key]:
            continue
        lo, med, hi = summarize(rows[key])
        print(f"{label:<58} {lo:>10.4g} {med:>10.4g} {hi:>10.4g}  {unit}")
    out = {"bench": "python", "reps": a.reps, "cores": os.cpu_count()}
    for key, name in (("ratio", "python_over_cpp"), ("cpu_ratio", "producer_cpu_ratio"),
                      ("cpp_rate", "cpp_samples_per_s"), ("py_rate", "py_samples_per_s"),
                      ("cpp_busy", "cpp_busy_us_per_batch"), ("py_busy", "py_busy_us_per_batch"),
                      ("rate_shared", "shared_samples_per_s"),
                      ("rate_direct", "independent_samples_per_s"),
                      ("py_busy_base", "baseline_py_busy_us_per_batch")):
        if not rows[key]:
            continue
        lo, med, hi = summarize(rows[key])
        out[name] = round(med, 4)
        out[name + "_min"] = round(lo, 4)
        out[name + "_max"] = round(hi, 4)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
