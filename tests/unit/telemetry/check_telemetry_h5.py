#!/usr/bin/python3
# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Checks a telemetry HDF5 file against docs/telemetry-format.md with h5py (and pandas if
installed). Exit 0 when it conforms; prints the first mismatch and exits 1 otherwise.

  check_telemetry_h5.py FILE --ranks N [--roles leader,consumer,...] [--batches 0,20,30]
      [--experiment E] [--workload W] [--run R] [--csv FILE] [--json FILE]
"""
import argparse
import json
import sys

import h5py
import numpy as np

COUNTERS = ["batches_received", "samples_received", "batches_produced", "samples_produced",
            "samples_skipped", "bytes_shm", "bytes_mpi", "bytes_h2d", "bytes_ipc", "bytes_nccl",
            "consumers_detached", "cache_hits", "cache_misses", "batches_replayed",
            "late_join_catch_ups", "late_joins_deferred"]
TIMERS = ["data_wait", "step", "read", "decode", "transform", "collate", "publish", "exchange"]
GAUGES = ["buffer_occupancy", "ring_occupancy", "ring_slots", "worker_threads",
          "consumers_attached"]


def fail(msg):
    print("check_telemetry_h5: " + msg, file=sys.stderr)
    sys.exit(1)


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("h5")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--roles")
    p.add_argument("--batches")
    p.add_argument("--experiment")
    p.add_argument("--workload")
    p.add_argument("--run")
    p.add_argument("--csv")
    p.add_argument("--json")
    a = p.parse_args()
    with h5py.File(a.h5, "r") as f:
        if s(f.attrs["format"]) != "batchcast-telemetry" or int(f.attrs["format_version"]) != 1:
            fail("root format attributes missing or wrong")
        if int(f.attrs["nranks"]) != a.ranks:
            fail(f"nranks {f.attrs['nranks']} != {a.ranks}")
        for key in ["summary", "diagnosis", "bottleneck"]:
            if not s(f.attrs[key]):
                fail(f"root attribute {key} empty")
        groups = sorted(k for k in f.keys() if k.startswith("rank_"))
        if groups != [f"rank_{i:05d}" for i in range(a.ranks)]:
            fail(f"groups {groups}")
        roles = a.roles.split(",") if a.roles else None
        batches = [int(x) for x in a.batches.split(",")] if a.batches else None
        for i, name in enumerate(groups):
            g = f[name]
            at = g.attrs
            if int(at["rank"]) != i:
                fail(f"{name}: rank attribute {at['rank']}")
            for key in ["host", "role", "experiment", "workload", "run"]:
                if key not in at:
                    fail(f"{name}: no attribute {key}")
            for key, want in [("experiment", a.experiment), ("workload", a.workload), ("run", a.run)]:
                if want is not None and s(at[key]) != want:
                    fail(f"{name}: {key} {s(at[key])!r} != {want!r}")
            if roles and s(at["role"]) != roles[i]:
                fail(f"{name}: role {s(at['role'])} != {roles[i]}")
            ser = g["series"]
            want_cols = (["time_s", "cpu_cores", "rss_bytes"] + COUNTERS + GAUGES +
                         [t + "_ns" for t in TIMERS] + [t + "_count" for t in TIMERS])
            for c in want_cols:
                if c not in ser:
                    fail(f"{name}: series/{c} missing")
            n = len(ser["time_s"])
            if n < 1:
                fail(f"{name}: empty series")
            if any(len(ser[c]) != n for c in ser.keys()):
                fail(f"{name}: series of different lengths")
            if not np.all(np.diff(ser["time_s"][()]) > 0):
                fail(f"{name}: time_s not increasing")
            if ser["batches_received"].dtype != np.int64 or ser["cpu_cores"].dtype != np.float64:
                fail(f"{name}: unexpected dtypes")
            gpu = int(at["gpu_present"]) != 0
            if gpu != ("gpu_util_pct" in ser):
                fail(f"{name}: gpu datasets present={'gpu_util_pct' in ser} but gpu_present={gpu}")
            if batches is not None:
                key = "batches_received" if s(at["role"]) != "leader" else "batches_produced"
                if int(ser[key][-1]) != batches[i]:
                    fail(f"{name}: {key} total {int(ser[key][-1])} != {batches[i]}")
            sp = g["spans"]
            for c in ["kind", "tid", "seq", "begin_ns", "end_ns"]:
                if c not in sp:
                    fail(f"{name}: spans/{c} missing")
            if "produce" not in s(sp.attrs["kind_names"]):
                fail(f"{name}: spans kind_names")
        try:
            import pandas as pd  # optional: the format promises pandas-friendly columns
            df = pd.DataFrame({k: v[()] for k, v in f[groups[0]]["series"].items()})
            if len(df) != len(f[groups[0]]["series"]["time_s"]):
                fail("pandas frame length")
        except ImportError:
            pass
    if a.csv:
        with open(a.csv) as fh:
            header = fh.readline().strip().split(",")
            if header[:4] != ["rank", "local_rank", "host", "role"] or "time_s" not in header:
                fail(f"csv header {header[:6]}")
            ranks_seen = {line.split(",")[0] for line in fh if line.strip()}
            if len(ranks_seen) != a.ranks:
                fail(f"csv has rows for {len(ranks_seen)} ranks")
    if a.json:
        with open(a.json) as fh:
            doc = json.load(fh)
        if len(doc["ranks"]) != a.ranks or doc["format"] != "batchcast-telemetry":
            fail("json ranks/format")
    print(f"check_telemetry_h5: {a.h5} ok ({a.ranks} ranks)")


if __name__ == "__main__":
    main()
