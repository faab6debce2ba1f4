# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Telemetry from the Python front doors (issue 16): Leader, Producer and Consumer record
through runtime/telemetry (the MPI runtime's collector, sinks and summary), one file set per
process; Leader.stats() reports the C++ leader's view; a bad spec is an error."""
import json
import os
import subprocess

import numpy as np
import pytest

import batchcast

BATCHES = 12


def series_total(rank, column):
    return sum(v for v in rank["series"][column] if v is not None)


def test_leader_and_consumer_write_their_own_files(fmnist, tmp_path, capfd):
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=16,
                              limit_samples=16 * BATCHES, rank=0,
                              telemetry=f"json={tmp_path}/run.%r.json,csv={tmp_path}/l.csv,"
                                        f"trace={tmp_path}/l.trace.json")
    loader = batchcast.Consumer(leader.address, batch_size=16, rank=1,
                                telemetry=f"json={tmp_path}/run.%r.json,hdf5={tmp_path}/c.h5")
    assert sum(1 for _ in loader) == BATCHES
    leader.wait()
    loader.close()
    mine = json.load(open(tmp_path / "run.0.json"))
    assert [(r["rank"], r["role"]) for r in mine["ranks"]] == [(0, "leader")]
    assert series_total(mine["ranks"][0], "samples_produced") == 16 * BATCHES
    assert mine["diagnosis"]["bottleneck"]                 # the summary's diagnosis
    theirs = json.load(open(tmp_path / "run.1.json"))
    assert [(r["rank"], r["role"]) for r in theirs["ranks"]] == [(1, "consumer")]
    assert series_total(theirs["ranks"][0], "batches_received") == BATCHES
    for f in ("l.csv", "l.trace.json", "c.h5"):
        assert (tmp_path / f).stat().st_size > 0, f
    stats = leader.stats()
    printed = capfd.readouterr().out  # the summaries, printed by C++ on stdout
    assert "diagnosis" in stats["telemetry_summary"] and stats["telemetry_summary"] in printed
    assert "diagnosis" in loader.telemetry_summary and loader.telemetry_summary in printed
    # The C++ leader's view: its counters and every consumer entry it knows.
    assert stats["done"] and stats["samples_produced"] == 16 * BATCHES
    assert stats["producer_batch"] > 0 and stats["fill_ns"] > 0
    assert [c["rank"] for c in stats["consumers"]] in ([1], [])


def test_consumer_records_named_series(fmnist, tmp_path):
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=16,
                              limit_samples=16 * 3, rank=0)
    loader = batchcast.Consumer(leader.address, batch_size=16, rank=1,
                                telemetry=f"json={tmp_path}/c.json")
    for step, batch in enumerate(loader):
        loader.record("model/net/loss", 1.0 / (step + 1))
    with pytest.raises(batchcast.InvalidArgumentError, match="series name 'model//loss'"):
        loader.record("model//loss", 1.0)
    leader.wait()
    loader.close()
    named = json.load(open(tmp_path / "c.json"))["ranks"][0]["named"]
    assert named["model/net/loss"]["value"] == [1.0, 0.5, 1.0 / 3]
    assert len(named["model/net/loss"]["time_s"]) == 3
    # The last batch outlives its consumer: its release still records its step into the
    # consumer's telemetry, which the batch keeps alive (it used to be freed first: a
    # segfault here).
    del loader, leader
    del batch
    # With telemetry off nothing is written, but a bad name is refused all the same.
    quiet = batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=16,
                             limit_samples=16)
    loader = batchcast.Consumer(quiet.address, batch_size=16)
    loader.record("model/net/loss", 1.0)
    with pytest.raises(batchcast.InvalidArgumentError, match="series name 'model//loss'"):
        loader.record("model//loss", 1.0)
    assert sum(1 for _ in loader) == 1
    quiet.wait()
    loader.close()


def test_producer_records_telemetry(tmp_path):
    batches = [(np.full((8, 1, 4, 4), k, np.uint8), np.arange(8)) for k in range(5)]
    producer = batchcast.Producer(batches, epochs=1, telemetry=f"json={tmp_path}/p.json",
                                  rank=3).start()
    loader = batchcast.Consumer(producer.address, batch_size=8)
    assert sum(1 for _ in loader) == 5
    producer.join()
    data = json.load(open(tmp_path / "p.json"))
    assert [(r["rank"], r["role"]) for r in data["ranks"]] == [(3, "leader")]
    assert producer.stats()["telemetry_summary"]


def test_a_bad_telemetry_spec_is_an_error(fmnist):
    with pytest.raises(batchcast.InvalidArgumentError, match="telemetry"):
        batchcast.Leader(fmnist["train"], telemetry="json=a.json,bogus=1")
    with pytest.raises(batchcast.InvalidArgumentError, match="telemetry"):
        batchcast.Producer([(np.zeros((2, 1, 1, 1), np.uint8), np.zeros(2))],
                           telemetry="interval=soon")


# --- issue 32: outputs checked at the start, failures at the end raised, the run directory ---

def test_front_doors_refuse_an_unwritable_path_before_starting(fmnist, tmp_path):
    (tmp_path / "plain").write_text("a file: nothing can be made below it, not even by root")
    bad = tmp_path / "plain" / "run.h5"
    with pytest.raises(batchcast.FailedPreconditionError, match=f"{bad}.*Not a directory"):
        batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=16,
                         limit_samples=32, telemetry=f"hdf5={bad}")
    with pytest.raises(batchcast.FailedPreconditionError, match=f"trace {bad}"):
        batchcast.Producer([(np.zeros((2, 1, 1, 1), np.uint8), np.zeros(2))],
                           telemetry=f"trace={bad}")
    # A consumer refuses before attaching: an address nobody listens on is never tried.
    with pytest.raises(batchcast.FailedPreconditionError, match="telemetry run directory"):
        batchcast.Consumer("batchcast-test-nobody-listens", batch_size=8,
                           telemetry=f"dir:{tmp_path}/plain/run")


def test_consumer_close_raises_when_its_file_cannot_be_written(fmnist, tmp_path):
    out = tmp_path / "out"
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=1, batch_size=16,
                              limit_samples=48)
    loader = batchcast.Consumer(leader.address, batch_size=16, telemetry=f"hdf5={out}/c.h5")
    assert sum(1 for _ in loader) == 3
    leader.wait()
    out.rmdir()
    out.write_text("the directory is gone; a file stands in its place")
    with pytest.raises(batchcast.IoError, match=f"{out}/c.h5"):
        loader.close()
    loader.close()  # once raised, closing again is quiet


def test_run_directory_holds_one_file_per_process_and_reports(fmnist, tmp_path):
    run = tmp_path / "run"
    leader = batchcast.Leader(fmnist["train"], consumers=1, epochs=2, batch_size=16,
                              limit_samples=64, telemetry=f"dir:{run}")
    loader = batchcast.Consumer(leader.address, batch_size=16, epochs=2, name="trial-x",
                                telemetry=f"dir:{run}")
    assert sorted(p.name.split("-")[0] for p in run.iterdir()) == ["consumer", "leader"]
    # Claimed at the start, written at the end (the leader may be done already).
    assert [p.stat().st_size for p in run.glob("consumer-*")] == [0]
    for _ in range(2):
        assert sum(1 for _ in loader) == 4
    leader.wait()
    loader.close()
    names = sorted(p.name for p in run.iterdir())
    host, pid = os.uname().nodename, os.getpid()
    assert names == [f"consumer-{host}-{pid}.h5", f"leader-{host}-{pid}.h5"], names
    report = tmp_path / "report"
    subprocess.run([os.environ["BCTEST_BIN"], "report", str(run), "--out", str(report)],
                   check=True, stdout=subprocess.DEVNULL)
    data = json.load(open(report / "report-data.json"))[0]
    (trial,) = data["trials"]
    assert trial["name"] == "trial-x" and trial["samples"] == 128
    # Leader and consumer share this process: its CPU is the leader's, not the trial's own.
    assert trial["own_cpu_s"] is None and "inside the leader's process" in trial["own_note"]
    assert trial["own"]["samples_received"] == 128  # matched to the consumer's own file
    assert data["job"]["processes"] == 1
