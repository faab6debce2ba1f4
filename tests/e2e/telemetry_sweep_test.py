#!/usr/bin/python3
# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""The sweep of issue 32, end to end (label e2e).

Four trials (telemetry_sweep_trial.py: Python consumers doing the same numpy work per batch)
train on one JPEG dataset twice:
  shared       all four attached to one `batchcast serve`;
  independent  each with a loader of its own (its own `batchcast serve`).
In both, trial-3 is SIGKILLed in the middle of its second epoch. Every process writes into the
run's directory (telemetry=dir:RUN). Then `batchcast report shared independent` must give one
page with per-trial cost and the saving, where:
  - each run lists its 4 trials, trial-3 as died (from the service's ledger: the trial never
    wrote its own file, which stays empty and is listed as unfinished), the others detached,
    each matched to its own telemetry file, which counted every sample of every epoch once;
  - the shared service published each sample once for several trials (sharing > 1.5), the
    independent ones once per trial (sharing 1), and the page says what sharing saved;
  - every service exited 0 after SIGTERM with its file written.
The directory it leaves (WORK/report) is what e2e_report_browser opens in Chromium.

    telemetry_sweep_test.py BATCHCAST_BIN WORK_DIR     (PYTHONPATH: the batchcast module)
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES, EPOCHS, BATCH, WORK = 384, 2, 32, 8
KILLED, KILL_AT = "trial-3", (1, 4)  # its batch 4 of epoch 1: mid-epoch


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def make_dataset(bin_, work):
    """384 JPEGs of 256x192 pixels with smooth content, converted by `batchcast convert`."""
    from PIL import Image
    src = os.path.join(work, "images")
    for c in range(4):
        os.makedirs(os.path.join(src, f"class{c}"), exist_ok=True)
    rng = np.random.default_rng(32)
    yy, xx = np.mgrid[0:192, 0:256]
    for i in range(SAMPLES):
        f = rng.uniform(0.02, 0.2, 3)
        img = np.stack([127 + 120 * np.sin(f[k] * (xx + 2 * k * yy) + i) for k in range(3)], -1)
        Image.fromarray(img.astype(np.uint8)).save(
            os.path.join(src, f"class{i % 4}", f"{i:04d}.jpg"), quality=90)
    out = os.path.join(work, "photos.h5")
    subprocess.run([bin_, "convert", "imagefolder", src, "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def start_service(bin_, dataset, socket, run_dir):
    p = subprocess.Popen(
        [bin_, "serve", "--socket", socket, "--dataset", dataset, "--image-size", "96",
         "--crop", "random", "--flip", "true", "--threads", "1", "--batch-size", str(BATCH),
         "--telemetry", f"telemetry(dir={run_dir},interval=100ms)", "--heartbeat-ms", "2000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    while line and "listening on" not in line:
        line = p.stdout.readline()
    if "listening on" not in line:
        fail(f"batchcast serve did not start: {p.stderr.read()}")
    return p


def run_sweep(bin_, dataset, run_dir, label, shared):
    """Four trials, trial-3 killed mid-epoch; returns what each surviving trial printed."""
    sockets = [f"bc-sweep-{os.getpid()}-{label}"] if shared else [
        f"bc-sweep-{os.getpid()}-{label}-{k}" for k in range(4)]
    services = [start_service(bin_, dataset, s, run_dir) for s in sockets]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")  # one core a trial
    trials = []
    for k in range(4):
        trials.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "telemetry_sweep_trial.py"),
             sockets[0 if shared else k], f"trial-{k}", str(EPOCHS), str(BATCH), str(SAMPLES),
             run_dir, str(WORK)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env))
    # All four attach first: until one consumes, the service fills at most its ring, which is
    # within the late-join window, so the later ones share epoch 0 (with a replay of its start).
    for k, t in enumerate(trials):
        line = t.stdout.readline()
        if line.strip() != "attached":
            fail(f"{label}: trial-{k} did not attach: {line!r} {t.stderr.read()[-3000:]}")
    for t in trials:
        t.stdin.write("go\n")
        t.stdin.flush()
    victim = trials[3]
    for line in victim.stdout:  # its own progress decides when: no sleeps, no timing
        if line.split() == ["batch", str(KILL_AT[0]), str(KILL_AT[1])]:
            victim.kill()
            break
    victim.wait(timeout=300)
    results = {}
    for k, t in enumerate(trials[:3]):
        out, err = t.communicate(timeout=600)
        if t.returncode != 0:
            fail(f"{label}: trial-{k} exited {t.returncode}:\n{err[-3000:]}")
        results[f"trial-{k}"] = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    for s in services:
        s.send_signal(signal.SIGTERM)
        out, err = s.communicate(timeout=120)
        if s.returncode != 0:
            fail(f"{label}: batchcast serve exited {s.returncode} after SIGTERM:\n{err[-3000:]}")
    return results


def main():
    bin_, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    dataset = make_dataset(bin_, work)
    printed = {}
    for label, shared in (("shared", True), ("independent", False)):
        printed[label] = run_sweep(bin_, dataset, os.path.join(work, label), label, shared)
        for name, r in printed[label].items():
            if not r["exactly_once"] or r["epochs"] != EPOCHS or r["samples"] != EPOCHS * SAMPLES:
                fail(f"{label}: {name} did not see every sample once per epoch: {r}")
    report = os.path.join(work, "report")
    cmd = [bin_, "report", os.path.join(work, "shared"), os.path.join(work, "independent"),
           "--labels", "shared,independent", "--out", report]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    print(r.stdout)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr}")
    with open(os.path.join(report, "report-data.json")) as fh:
        runs = {run["label"]: run for run in json.load(fh)}
    for label in ("shared", "independent"):
        check_run(runs[label], label, printed[label], services=1 if label == "shared" else 4)
    shared, independent = runs["shared"]["job"], runs["independent"]["job"]
    # 4 trials share epochs 0 and 1 (one killed in epoch 1); replays of epoch 0's start to
    # the later joiners are at most 3 x ring slots batches: sharing is at least ~1.8.
    if not shared["sharing"] > 1.5:
        fail(f"shared: {shared['sharing']} samples delivered per sample decoded, expected > 1.5")
    if abs(independent["sharing"] - 1.0) > 1e-9:
        fail(f"independent: sharing {independent['sharing']}, expected exactly 1")
    if not shared["saved_cpu_s"] > 0 or independent["saved_cpu_s"] > 1e-9:
        fail(f"saved CPU-s: shared {shared['saved_cpu_s']}, independent "
             f"{independent['saved_cpu_s']}")
    page = open(os.path.join(report, "report.html"), encoding="utf-8").read()
    for want in ('id="compare-job"', 'id="compare-trials"', "sharing saved", "trial-3",
                 "Cost per trial, run by run", 'data-plot="compare_trial_cost"'):
        if want not in page:
            fail(f"report.html lacks {want!r}")
    print_table(runs)
    print("PASS: telemetry sweep: shared and independent runs reported side by side")


def check_run(run, label, printed, services):
    job = run["job"]
    if job["trials"] != 4 or job["trials_died"] != 1:
        fail(f"{label}: {job['trials']} trials, {job['trials_died']} died; expected 4 and 1")
    if len(run["unfinished"]) != 1 or "consumer-" not in os.path.basename(run["unfinished"][0]):
        fail(f"{label}: expected the killed trial's empty file as unfinished: {run['unfinished']}")
    if len(run["files"]) != services + 3:
        fail(f"{label}: {len(run['files'])} written files, expected {services} services + 3")
    by = {t["name"]: t for t in run["trials"]}
    if sorted(by) != [f"trial-{k}" for k in range(4)]:
        fail(f"{label}: trials {sorted(by)}")
    killed = by[KILLED]
    if killed["end"] != "died" or killed["own"] is not None:
        fail(f"{label}: {KILLED} should have died without a file of its own: {killed}")
    if not SAMPLES <= killed["samples"] < EPOCHS * SAMPLES + 8 * BATCH:
        fail(f"{label}: {KILLED} received {killed['samples']} samples before it was killed")
    if killed["own_cpu_s"] is None or killed["own_cpu_s"] <= 0:
        fail(f"{label}: the killed trial's own CPU (read by its leader) is missing: {killed}")
    for name, p in printed.items():
        t = by[name]
        if t["end"] != "detached" or t["own"] is None:
            fail(f"{label}: {name} should have detached and written its file: {t}")
        if t["own"]["samples_received"] != p["samples"]:
            fail(f"{label}: {name}'s file says {t['own']['samples_received']} samples, it "
                 f"printed {p['samples']}")
        if t["samples"] < p["samples"]:
            fail(f"{label}: the ledger published {t['samples']} samples to {name}, fewer than "
                 f"it received ({p['samples']})")
        if t["leader_cpu_s"] is None or t["leader_cpu_s"] <= 0 or t["total_cpu_s"] is None:
            fail(f"{label}: {name} has no cost: {t}")
    if job["cpu_energy_j"] is None and not job["energy_note"]:
        fail(f"{label}: energy is n/a without saying why")


def print_table(runs):
    rows = [("trials (died)", lambda j: f"{j['trials']} ({j['trials_died']})"),
            ("wall s", lambda j: f"{j['wall_s']:.1f}"),
            ("samples delivered", lambda j: f"{j['samples_delivered']:.0f}"),
            ("samples/s delivered", lambda j: f"{j['samples_per_s']:.0f}"),
            ("data wait %", lambda j: f"{j['data_wait_pct']:.1f}"),
            ("CPU s (all processes)", lambda j: f"{j['cpu_s']:.2f}"),
            ("CPU s per 1000 samples", lambda j: f"{j['cpu_s_per_1000_samples']:.3f}"),
            ("peak RSS MiB (sum)", lambda j: f"{j['rss_peak_mib']:.0f}"),
            ("leader CPU s to trials", lambda j: f"{j['leader_cpu_s']:.2f}"),
            ("cost per trial CPU s", lambda j: f"{j['cost_per_trial_cpu_s']:.2f}"),
            ("saved CPU s (sharing x)", lambda j: f"{j['saved_cpu_s']:.2f} ({j['sharing']:.2f}x)"),
            ("energy", lambda j: "n/a" if j["cpu_energy_j"] is None else f"{j['cpu_energy_j']:.0f} J")]
    print(f"{'':28} {'shared':>16} {'independent':>16}")
    for name, f in rows:
        print(f"{name:28} {f(runs['shared']['job']):>16} {f(runs['independent']['job']):>16}")
    print(f"energy note: {runs['shared']['job']['energy_note']}")


if __name__ == "__main__":
    main()
