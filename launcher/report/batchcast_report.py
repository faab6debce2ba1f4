#!/usr/bin/python3
# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Render Batchcast telemetry (docs/telemetry.md "Report") as plots and one HTML page.

    batchcast report RUN [--out DIR]                    (the CLI runs this script)
    batchcast report RUN_A RUN_B [--labels a,b] [--out DIR]

RUN is a run directory (telemetry=dir:RUN: one file per process of the run, whatever its
front door) or one telemetry file. The CLI reads every file of every run, merges and
diagnoses them with the runtime's own summary code (telemetry/run_report.h) and hands this
script the tables as JSON (--data); the script reads the time series with h5py and writes
DIR/<plot>.png and .svg, DIR/report.json (the tables and the plotted numbers) and
DIR/report.html: a self-contained page (images inlined as base64 PNG) with the diagnosis,
the job, per-trial cost, per-node and per-rank tables, the plots, the summary as printed and
the annotations. Plots: throughput, data_wait, cpu, rss, stages (where each thread's time
went, waits apart from work, the diagnosed bottleneck outlined), trials (each trial's own CPU
and its share of the leader), energy (node power, when the machine tells it), gpu (with a
GPU), resize (with a progressive-resizing schedule), accuracy (with evaluations), models
(with train-many's model/<name>/... named series). With several runs the page compares them
side by side: the job table with one column per run (and the ratio of two), the per-trial
cost of every trial in every run, throughput and trial cost plots, accuracy over time.

Run directly on telemetry files without --data it renders what the files hold (each file's
own summary and diagnosis, no merged tables). A `batchcast profile --json` file instead
(docs/profiler.md) gives DIR/profile.png/.svg and DIR/profile.html.
Needs h5py, numpy and matplotlib.
"""
import argparse
import base64
import html
import json
import os
import re
import sys

import h5py
import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIG_W_IN, FIG_H_IN = 10.0, 4.0  # at --dpi 100: 1000 x 400 pixel PNGs
# Where the time went: a leader's decode workers, its producer thread, a consumer's loop.
WORKER_PARTS = ["read", "decode", "transform", "lock_wait"]
PRODUCER_PARTS = ["collate", "publish", "stage", "exchange", "queue_wait", "slot_wait"]
CONSUMER_PARTS = ["step", "data_wait"]
WAITS = {"lock_wait", "queue_wait", "slot_wait", "data_wait"}
PART_COLOURS = {
    "read": "#1f77b4", "decode": "#ff7f0e", "transform": "#2ca02c", "collate": "#9467bd",
    "publish": "#8c564b", "stage": "#e377c2", "exchange": "#17becf", "lock_wait": "#d62728",
    "queue_wait": "#bcbd22", "slot_wait": "#7f7f7f", "step": "#2ca02c", "data_wait": "#d62728",
    "idle": "#eeeeee", "other": "#eeeeee",
}


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def load(path):
    """Returns (root attributes, [rank dict]) from a telemetry HDF5 file."""
    with h5py.File(path, "r") as f:
        if text(f.attrs.get("format", "")) != "batchcast-telemetry":
            raise ValueError(f"{path}: not a batchcast telemetry file (no format attribute)")
        root = {k: (text(v) if isinstance(v, (str, bytes)) else v) for k, v in f.attrs.items()}
        ranks = []
        for name in sorted(k for k in f.keys() if k.startswith("rank_")):
            g = f[name]
            attrs = {k: (text(v) if isinstance(v, (str, bytes)) else v) for k, v in g.attrs.items()}
            series = {k: np.asarray(g["series"][k][()]) for k in g["series"].keys()}
            named = {}  # named/<series name>: (n, 2) rows of (time_s, value)
            if "named" in g:
                g["named"].visititems(lambda path, obj: named.__setitem__(
                    path, np.asarray(obj[()]).reshape(-1, 2)) if isinstance(obj, h5py.Dataset)
                    else None)
            trials = json.loads(attrs["trials"]) if attrs.get("trials") else None
            ranks.append({"name": name, "attrs": attrs, "series": series, "named": named,
                          "trials": trials, "file": path})
    return root, ranks


def total_s(r, timer):
    """A timer's total seconds over the rank's run (0 when the file predates the timer)."""
    v = r["series"].get(timer + "_ns")
    return float(v[-1]) / 1e9 if v is not None and len(v) else 0.0


def rate(t, cum):
    """Per-interval rate of a cumulative series, at the interval ends."""
    if len(t) < 2:
        return np.array([]), np.array([])
    dt = np.diff(t)
    dv = np.diff(cum.astype(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(dt > 0, dv / dt, np.nan)
    return t[1:], r


def wait_pct(s):
    t = s["time_s"]
    if len(t) < 2:
        return np.array([]), np.array([])
    dw = np.diff(s["data_wait_ns"].astype(float))
    ds = np.diff(s["step_ns"].astype(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(dw + ds > 0, 100.0 * dw / (dw + ds), np.nan)
    return t[1:], p


def label(r):
    if "display" in r:
        return r["display"]
    a = r["attrs"]
    return f"rank {a['rank']} {a['role']}"


def is_consumer(r):
    return r["attrs"]["role"] in ("consumer", "both")


def new_figure(title, ylabel):
    fig, ax = plt.subplots(figsize=(FIG_W_IN, FIG_H_IN))
    ax.set_title(title)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def finish(fig, ax, out, name, dpi, images):
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc="best", fontsize="small", ncol=max(1, len(handles) // 8))
    fig.tight_layout()
    png = os.path.join(out, name + ".png")
    fig.savefig(png, dpi=dpi)  # no bbox_inches: the pixel size stays FIG_W_IN x FIG_H_IN x dpi
    fig.savefig(os.path.join(out, name + ".svg"))
    plt.close(fig)
    images.append((name, png))


def finish_panels(fig, axes, out, name, dpi, images):
    """Saves a figure of stacked panels over time (legend on the first) as PNG and SVG."""
    for ax in axes:
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("time since start (s)")
    axes[0].legend(loc="best", fontsize="small")
    fig.tight_layout()
    png = os.path.join(out, name + ".png")
    fig.savefig(png, dpi=dpi)
    fig.savefig(os.path.join(out, name + ".svg"))
    plt.close(fig)
    images.append((name, png))


def offset(r, t0):
    return r["attrs"].get("start_unix_s", 0.0) - t0


def stage_shares(r):
    """Where one rank's threads spent their time, as shares of each thread's wall time:
    [(bar label, kind, {part: share})], kind workers|producer|consumer."""
    a, s = r["attrs"], r["series"]
    wall = float(a.get("wall_s", 0) or 0)
    if wall <= 0:
        return []
    bars = []
    role = a["role"]
    if role in ("leader", "both"):
        threads = s.get("worker_threads")
        threads = float(np.max(threads)) if threads is not None and len(threads) else 0.0
        if threads > 0:
            w = {p: total_s(r, p) / (threads * wall) for p in WORKER_PARTS}
            w["idle"] = max(0.0, 1.0 - sum(w.values()))
            bars.append((f"{label(r)}: {threads:.0f} decode workers", "workers", w))
        p = {k: total_s(r, k) / wall for k in PRODUCER_PARTS}
        p["other"] = max(0.0, 1.0 - sum(p.values()))
        bars.append((f"{label(r)}: producer thread", "producer", p))
    if role in ("consumer", "both"):
        c = {k: total_s(r, k) / wall for k in CONSUMER_PARTS}
        if sum(c.values()) > 0:
            c["other"] = max(0.0, 1.0 - sum(c.values()))
            bars.append((f"{label(r)}: training loop", "consumer", c))
    return bars


def plot_stages(ranks, diagnosis, out, dpi, images):
    """'Where the time went': one bar per thread group, work and waits apart, the part the
    diagnosis names outlined, so the plot and the printed diagnosis tell the same story."""
    bars = [b for r in ranks for b in stage_shares(r)][:24]
    bottleneck = diagnosis.get("bottleneck", "unknown")
    blamed = diagnosis.get("stage", "") if bottleneck == "input" else (
        "step" if bottleneck == "compute" else "")
    fig, ax = plt.subplots(figsize=(FIG_W_IN, FIG_H_IN))
    ax.set_title(f"where the time went (share of each thread's wall time): {bottleneck}-bound"
                 + (f", {diagnosis.get('stage')}" if bottleneck == "input" and
                    diagnosis.get("stage") else ""), fontsize="medium")
    seen = set()
    for y, (name, kind, parts) in enumerate(bars):
        left = 0.0
        for part, share in parts.items():
            if share <= 0:
                continue
            lab = part if part not in seen else None
            seen.add(part)
            ax.barh(y, 100 * share, left=100 * left, color=PART_COLOURS.get(part, "#999999"),
                    hatch="//" if part in WAITS else None,
                    edgecolor="black" if part == blamed else "white",
                    linewidth=2.5 if part == blamed else 0.5, label=lab)
            left += share
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels([b[0] for b in bars], fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of wall time (waits hatched; the diagnosed bottleneck outlined)")
    ax.grid(True, axis="x", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc="lower right", fontsize="x-small", ncol=4)
    fig.tight_layout()
    png = os.path.join(out, "stages.png")
    fig.savefig(png, dpi=dpi)
    fig.savefig(os.path.join(out, "stages.svg"))
    plt.close(fig)
    images.append(("stages", png))
    return {"bottleneck": bottleneck, "stage": diagnosis.get("stage", ""), "outlined": blamed,
            "bars": [{"label": n, "kind": k, "shares": p} for n, k, p in bars]}


def plot_trials(trials, out, dpi, images):
    """Each trial's CPU seconds: its own process and its share of the leader's."""
    if not trials:
        return
    fig, ax = plt.subplots(figsize=(FIG_W_IN, FIG_H_IN))
    ax.set_title("cost per trial: own CPU and the leader's CPU apportioned by samples received")
    names = [f"{t['name']} ({t['end']})" for t in trials]
    own = np.array([t["own_cpu_s"] if t["own_cpu_s"] is not None else 0.0 for t in trials])
    share = np.array([t["leader_cpu_s"] or 0.0 for t in trials])
    y = np.arange(len(trials))
    ax.barh(y, own, color="#1f77b4", label="own process CPU s")
    ax.barh(y, share, left=own, color="#ff7f0e", label="share of the leader's CPU s")
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("CPU seconds")
    ax.grid(True, axis="x", alpha=0.3)
    finish(fig, ax, out, "trials", dpi, images)


def plot_energy(ranks, out, dpi, images, t0):
    """Node package power (RAPL) and GPU power over time, from the cumulative joules."""
    lines = [(r, k) for r in ranks for k in ("cpu_energy_j", "gpu_energy_j") if k in r["series"]]
    if not lines:
        return
    fig, ax = new_figure("energy: power the machine reported", "watts")
    for r, k in lines:
        t, v = rate(r["series"]["time_s"], r["series"][k])
        ax.plot(t + offset(r, t0), v, label=f"{label(r)} {'CPU packages' if k[0] == 'c' else 'GPU'}")
    finish(fig, ax, out, "energy", dpi, images)


def plot_all(ranks, out, dpi, diagnosis, trials):
    """Every plot of one run; returns (images, the stage plot's numbers)."""
    images = []
    t0 = min((r["attrs"].get("start_unix_s", 0.0) for r in ranks), default=0.0)

    fig, ax = new_figure("throughput per rank", "samples / s")
    for r in ranks:
        s = r["series"]
        key = "samples_received" if is_consumer(r) else "samples_produced"
        t, v = rate(s["time_s"], s[key])
        ax.plot(t + offset(r, t0), v, label=f"{label(r)} ({key.split('_')[1]})")
    finish(fig, ax, out, "throughput", dpi, images)

    fig, ax = new_figure("data wait: share of step time blocked on the next batch", "data wait %")
    for r in ranks:
        if is_consumer(r):
            t, v = wait_pct(r["series"])
            ax.plot(t + offset(r, t0), v, label=label(r))
    ax.set_ylim(0, 100)
    finish(fig, ax, out, "data_wait", dpi, images)

    fig, ax = new_figure("process CPU use", "cores busy")
    for r in ranks:
        s = r["series"]
        ax.plot(s["time_s"] + offset(r, t0), s["cpu_cores"], label=label(r))
    finish(fig, ax, out, "cpu", dpi, images)

    fig, ax = new_figure("resident memory", "RSS (MiB)")
    for r in ranks:
        s = r["series"]
        ax.plot(s["time_s"] + offset(r, t0), s["rss_bytes"] / 2**20, label=label(r))
    finish(fig, ax, out, "rss", dpi, images)

    gpu_ranks = [r for r in ranks if "gpu_util_pct" in r["series"]]
    if gpu_ranks:
        fig, ax = new_figure("GPU utilisation (NVML)", "GPU busy %")
        for r in gpu_ranks:
            s = r["series"]
            ax.plot(s["time_s"] + offset(r, t0), s["gpu_util_pct"], label=label(r))
        ax.set_ylim(0, 100)
        finish(fig, ax, out, "gpu", dpi, images)

    stages = plot_stages(ranks, diagnosis, out, dpi, images)
    plot_trials(trials, out, dpi, images)
    plot_energy(ranks, out, dpi, images, t0)
    plot_resize(ranks, out, dpi, images, t0)
    plot_models(ranks, out, dpi, images, t0)
    plot_accuracy([("", None, ranks)], out, dpi, images)
    return images, stages


def trial_names(runs):
    """Every trial name of the runs, in order of first appearance (trials match by name)."""
    names = []
    for run in runs:
        for t in run["data"].get("trials", []):
            if t["name"] not in names:
                names.append(t["name"])
    return names


def plot_compare(runs, out, dpi):
    """Plots comparing several runs: throughput, trial cost, accuracy, resize gauges."""
    images = []
    fig, ax = new_figure("throughput delivered to the trainers (all consumers of a run)",
                         "samples / s")
    for run in runs:
        ranks = run["ranks"]
        t0 = min((r["attrs"].get("start_unix_s", 0.0) for r in ranks), default=0.0)
        grid, total = None, None
        for r in ranks:
            if not is_consumer(r):
                continue
            t, v = rate(r["series"]["time_s"], r["series"]["samples_received"])
            if not len(t):
                continue
            t = t + offset(r, t0)
            if grid is None:
                grid = np.linspace(0, max(1.0, float(t[-1])), 200)
                total = np.zeros_like(grid)
            elif t[-1] > grid[-1]:
                total = np.interp(np.linspace(0, float(t[-1]), 200), grid, total, right=0)
                grid = np.linspace(0, float(t[-1]), 200)
            total += np.interp(grid, t, np.nan_to_num(v), left=0, right=0)
        if grid is not None:
            ax.plot(grid, total, label=run["label"])
    finish(fig, ax, out, "compare_throughput", dpi, images)

    names = trial_names(runs)
    if names:
        fig, ax = plt.subplots(figsize=(FIG_W_IN, FIG_H_IN))
        ax.set_title("CPU seconds per trial: own process (solid) + share of its leader (light)")
        width = 0.8 / len(runs)
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, run in enumerate(runs):
            by = {t["name"]: t for t in run["data"].get("trials", [])}
            own = np.array([(by[n]["own_cpu_s"] or 0.0) if n in by else 0.0 for n in names])
            share = np.array([(by[n]["leader_cpu_s"] or 0.0) if n in by else 0.0 for n in names])
            x = np.arange(len(names)) + i * width
            c = colours[i % len(colours)]
            ax.bar(x, own, width, color=c, label=f"{run['label']}: own")
            ax.bar(x, share, width, bottom=own, color=c, alpha=0.4,
                   label=f"{run['label']}: leader share")
        ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2)
        ax.set_xticklabels(names, fontsize="x-small")
        ax.set_ylabel("CPU seconds")
        ax.grid(True, axis="y", alpha=0.3)
        finish(fig, ax, out, "compare_trial_cost", dpi, images)

    legacy = [(run["label"], None, run["ranks"]) for run in runs]
    plot_accuracy(legacy, out, dpi, images)
    for name, ylabel in RESIZE_GAUGES:
        scheduled = [(run_label, r) for run_label, _, ranks in legacy for r in ranks
                     if is_consumer(r) and has_gauge(r, name)]
        if not scheduled:
            continue
        fig, ax = new_figure(f"{ylabel} received by the trainers (runs with a resize schedule)",
                             ylabel)
        for run_label, r in scheduled:
            s = r["series"]
            ax.step(s["time_s"], np.where(s[name] > 0, s[name], np.nan), where="post",
                    label=f"{run_label}: {label(r)}")
        finish(fig, ax, out, "compare_" + name, dpi, images)
    return images


RESIZE_GAUGES = [("image_size", "image size (px)"), ("batch_size", "batch size (samples)"),
                 ("lr_factor", "LR factor")]
EVAL_LINE = re.compile(r"eval: train_s=([0-9.]+) wall_s=([0-9.]+) epoch=([0-9]+) "
                       r"samples=([0-9.]+) accuracy=([0-9.]+)(?: cpu_s=([0-9.]+))?")


# `batchcast train-many` records model/<name>/<metric> named series (docs/multi-model.md
# "Telemetry"): per step loss, accuracy, step_ms, samples_per_s; per epoch epoch_loss,
# epoch_accuracy, peak_rss_mib.
MODEL_SERIES = re.compile(r"^model/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)$")


def model_series(ranks):
    """{model: {metric: (rank, time_s array, value array)}} of every rank's model/ series."""
    out = {}
    for r in ranks:
        for path, rows in r.get("named", {}).items():
            m = MODEL_SERIES.match(path)
            if m:
                out.setdefault(m.group(1), {})[m.group(2)] = (r, rows[:, 0], rows[:, 1])
    return out


def model_row(metrics):
    """(epochs, last epoch loss, last epoch accuracy, mean samples/s, mean step ms, peak RSS)."""
    def values(k):
        return metrics[k][2] if k in metrics else np.array([])

    def last(k):
        v = values(k)
        return v[-1] if len(v) else float("nan")

    def mean(k):
        v = values(k)
        return float(np.mean(v)) if len(v) else float("nan")

    peak = values("peak_rss_mib")
    return (len(values("epoch_loss")), last("epoch_loss"), last("epoch_accuracy"),
            mean("samples_per_s"), mean("step_ms"), float(np.max(peak)) if len(peak) else float("nan"))


def models_html(ranks):
    series = model_series(ranks)
    if not series:
        return ""
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in [
            name, e, fmt(loss, ".4f"), fmt(acc, ".4f"), fmt(sps), fmt(ms, ".2f"), fmt(rss, ".0f")])
        + "</tr>"
        for name, (e, loss, acc, sps, ms, rss) in
        ((name, model_row(m)) for name, m in series.items()))
    return ("<h2>Models (batchcast train-many)</h2><table><tr><th>model</th><th>epochs</th>"
            "<th>last epoch loss</th><th>last epoch accuracy</th><th>samples/s</th><th>step ms</th>"
            "<th>peak RSS MiB (process)</th></tr>" + rows + "</table>")


def plot_models(ranks, out, dpi, images, t0):
    """Per model: step loss, step accuracy and samples/s over time (one line per model)."""
    series = model_series(ranks)
    if not series:
        return
    panels = [("loss", "loss (per step)"), ("accuracy", "accuracy (per step)"),
              ("samples_per_s", "samples / s (per step)")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(FIG_W_IN, FIG_H_IN * 1.8), sharex=True)
    fig.suptitle("models (batchcast train-many): named series model/<name>/...")
    for ax, (metric, ylabel) in zip(axes, panels):
        for name, metrics in series.items():
            if metric in metrics:
                r, t, v = metrics[metric]
                ax.plot(t + offset(r, t0), v, label=name)
        ax.set_ylabel(ylabel)
    finish_panels(fig, axes, out, "models", dpi, images)


def has_gauge(r, name):
    v = r["series"].get(name)
    return v is not None and len(v) > 0 and np.nanmax(np.abs(v)) > 0


def evals(r):
    """Evaluations a trainer annotated: [(train_s, wall_s, epoch, samples, accuracy, cpu_s)]
    (cpu_s: the training thread's CPU seconds; NaN when not recorded)."""
    return [tuple(float(x) if x is not None else float("nan") for x in m.groups())
            for m in EVAL_LINE.finditer(text(r["attrs"].get("annotations", "")))]


def plot_resize(ranks, out, dpi, images, t0):
    """Image size, batch size and LR factor over time (leader: produced; consumers: received)."""
    resized = [r for r in ranks if has_gauge(r, "image_size")]
    if not resized:
        return
    fig, axes = plt.subplots(3, 1, figsize=(FIG_W_IN, FIG_H_IN * 1.8), sharex=True)
    fig.suptitle("progressive resizing: interval means of what each rank produced / received")
    for ax, (name, ylabel) in zip(axes, RESIZE_GAUGES):
        for r in resized:
            s = r["series"]
            v = np.where(s[name] > 0, s[name], np.nan)
            ax.step(s["time_s"] + offset(r, t0), v, where="post", label=label(r))
        ax.set_ylabel(ylabel)
    finish_panels(fig, axes, out, "resize", dpi, images)


def plot_accuracy(runs, out, dpi, images):
    """Held-out accuracy over training time, one line per (run, trainer rank)."""
    lines = [(run_label, r, evals(r)) for run_label, _, ranks in runs for r in ranks if evals(r)]
    if not lines:
        return
    axes = [(0, "accuracy", "training time (s, evaluation excluded)"),
            (1, "accuracy_wall", "wall time since the trainer started (s)")]
    if any(not np.isnan(p[5]) for _, _, pts in lines for p in pts):
        axes.append((5, "accuracy_cpu", "CPU time of the training thread (s, evaluation excluded)"))
    for axis, title, xlabel in axes:
        fig, ax = new_figure("held-out accuracy over time", "accuracy (%)")
        ax.set_xlabel(xlabel)
        for run_label, r, pts in lines:
            xs = [p[axis] for p in pts]
            ys = [100.0 * p[4] for p in pts]
            name = f"{run_label}: {label(r)}" if run_label else label(r)
            ax.plot(xs, ys, marker="o", label=f"{name} (final {ys[-1]:.1f}%)")
        finish(fig, ax, out, title, dpi, images)


def fmt(v, spec=".1f"):
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if np.isnan(v) else format(v, spec)


def cell(v, spec=".1f"):
    """A table cell: a number keeps its exact value in data-value (the page's tables can be
    checked against the run's numbers); None (not measured) reads n/a."""
    if v is None:
        return '<td class="na">n/a</td>'
    if isinstance(v, str):
        return f"<td>{html.escape(v)}</td>"
    if isinstance(v, (bool, np.bool_)):
        return f"<td>{'yes' if v else 'no'}</td>"
    if isinstance(v, (int, np.integer)):
        return f'<td data-value="{int(v)}">{int(v)}</td>'
    return f'<td data-value="{float(v)!r}">{fmt(v, spec)}</td>'


def table(table_id, headers, rows):
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


JOB_COLUMNS = [  # (header, key, format): the per-job table and the comparison's rows
    ("wall s", "wall_s", ".1f"), ("processes", "processes", "d"), ("trials", "trials", "d"),
    ("trials died", "trials_died", "d"), ("samples delivered", "samples_delivered", ".0f"),
    ("samples/s delivered", "samples_per_s", ".1f"), ("data wait %", "data_wait_pct", ".1f"),
    ("CPU s (all processes)", "cpu_s", ".2f"),
    ("CPU s per 1000 samples", "cpu_s_per_1000_samples", ".3f"),
    ("peak RSS MiB (sum)", "rss_peak_mib", ".0f"), ("GPU %", "gpu_util_pct", ".1f"),
    ("CPU energy J", "cpu_energy_j", ".1f"), ("GPU energy J", "gpu_energy_j", ".1f"),
    ("J per epoch", "joules_per_epoch", ".1f"),
    ("J per 1000 samples", "joules_per_1000_samples", ".2f"),
    ("leader CPU s to trials", "leader_cpu_s", ".2f"),
    ("cost per trial CPU s", "cost_per_trial_cpu_s", ".2f"),
    ("saved CPU s", "saved_cpu_s", ".2f"), ("sharing x", "sharing", ".2f"),
]


def job_html(run, idx):
    j = run["data"].get("job")
    if not j:
        return ""
    rows = [[cell(h), cell(j.get(k), spec)] for h, k, spec in JOB_COLUMNS]
    saving = ""
    if j.get("trials"):
        saving = (f"<p class=\"saving\">The leaders spent <b>{fmt(j.get('leader_cpu_s'), '.2f')} "
                  f"CPU-s</b> on {j['trials']} trials ({j.get('trials_died', 0)} died or went "
                  f"silent); each trial decoding alone would have spent "
                  f"<b>{fmt(j.get('alone_cpu_s'), '.2f')} CPU-s</b>: sharing saved "
                  f"<b>{fmt(j.get('saved_cpu_s'), '.2f')} CPU-s</b> "
                  f"({fmt(j.get('sharing'), '.2f')} samples delivered per sample decoded). "
                  f"{fmt(j.get('unattributed_cpu_s'), '.2f')} CPU-s of the leaders fell in "
                  f"intervals where no trial received anything.</p>")
    energy = ("<p class=\"energy\">Energy: " + (
        f"CPU packages {fmt(j.get('cpu_energy_j'))} J, GPUs {fmt(j.get('gpu_energy_j'))} J; "
        f"{fmt(j.get('joules_per_epoch'))} J per epoch, "
        f"{fmt(j.get('joules_per_1000_samples'), '.2f')} J per 1000 samples delivered"
        if j.get("cpu_energy_j") is not None or j.get("gpu_energy_j") is not None else "n/a")
        + (f" ({html.escape(j['energy_note'])})" if j.get("energy_note") else "") + "</p>")
    return ("<h2>Job</h2>" + table(f"job-{idx}", ["metric", "value"], rows) + saving + energy)


def trials_html(run, idx):
    trials = run["data"].get("trials", [])
    if not trials:
        return ""
    rows = []
    for t in trials:
        own = t.get("own") or {}
        rows.append([cell(t["name"]), cell(t["end"]), cell(t["pid"]), cell(t["attach_s"]),
                     cell(t["leave_s"]), cell(t["samples"]), cell(own.get("samples_received"), ".0f"),
                     cell(t["epochs"]),
                     cell(t["bytes"] / 2**20, ".1f"),
                     cell(t["own_cpu_s"], ".2f"), cell(t["leader_cpu_s"], ".2f"),
                     cell(t["total_cpu_s"], ".2f"), cell(t["leader_gpu_s"], ".2f"),
                     cell(t["energy_j"]), cell(t["own_peak_rss_mib"], ".0f"),
                     cell(own.get("data_wait_pct")), cell(own.get("step_ms"), ".2f")])
    notes = "".join(f"<li>{html.escape(t['name'])}: {html.escape(t['own_note'])}</li>"
                    for t in trials if t.get("own_note"))
    return ("<h2>Trials: what each received and cost</h2>"
            "<p>Samples sent: what the leader published to the trial (its ledger; a trial that "
            "stops reading still has the batches in its buffer sent to it), epochs sent: the "
            "epochs those came from; samples received: what the trial's own telemetry file "
            "counted, when it wrote one. Own CPU: the trial's process since it attached, read by "
            "its leader from /proc (kept for trials that were killed). Leader CPU: the leader's "
            "CPU seconds of each sampling interval split over the trials by the samples sent to "
            "each in it (docs/telemetry.md, \"Cost model\"). Data wait and step come from the "
            "trial's own file.</p>"
            + table(f"trials-{idx}", ["trial", "end", "pid", "attached s", "left s",
                                      "samples sent", "samples received", "epochs sent",
                                      "MiB sent", "own CPU s", "leader CPU s", "total CPU s",
                                      "leader GPU s", "energy J", "peak RSS MiB",
                                      "data wait %", "step ms"], rows)
            + (f"<ul>{notes}</ul>" if notes else ""))


def nodes_html(run, idx):
    nodes = run["data"].get("nodes", [])
    if not nodes:
        return ""
    rows = [[cell(n["host"]), cell(n["processes"]), cell(n["ranks"]), cell(n["cpu_s"], ".2f"),
             cell(n["samples_produced"], ".0f"), cell(n["samples_delivered"], ".0f"),
             cell(n["rss_peak_mib"], ".0f"), cell(n.get("cpu_energy_j")),
             cell(n.get("gpu_energy_j"))] for n in nodes]
    return ("<h2>Nodes</h2>" + table(f"nodes-{idx}", [
        "host", "processes", "ranks", "CPU s", "samples produced", "samples delivered",
        "peak RSS MiB (sum)", "CPU energy J", "GPU energy J"], rows))


def ranks_html(run, idx):
    data_ranks = run["data"].get("ranks")
    rows = []
    if data_ranks:
        for r in data_ranks:
            rows.append([cell(r["rank"]), cell(os.path.basename(r["file"])), cell(r["host"]),
                         cell(r["role"]), cell(r["pid"]), cell(r["samples_per_s"]),
                         cell(r["data_wait_pct"]), cell(r["step_ms"], ".2f"),
                         cell(r["cpu_cores"], ".2f"), cell(r["cpu_s"], ".2f"),
                         cell(r["rss_peak_mib"], ".0f"), cell(r["gpu_util_pct"]),
                         cell(r["cpu_energy_source"])])
        headers = ["rank", "file", "host", "role", "pid", "samples/s", "data wait %", "step ms",
                   "cpu cores", "CPU s", "peak RSS MiB", "GPU %", "CPU energy"]
    else:  # a file without the merged data: what its rank groups say
        for r in run["ranks"]:
            a = r["attrs"]
            rows.append([f"<td>{html.escape(str(x))}</td>" for x in [
                a["rank"], a["host"], a["role"], fmt(a.get("samples_per_s")),
                fmt(a.get("data_wait_pct")), fmt(a.get("step_ms"), ".2f"),
                fmt(a.get("cpu_cores"), ".2f"), fmt(a.get("peak_rss_bytes", 0) / 2**20, ".0f"),
                text(a.get("gpu_name", "-")) if a.get("gpu_present", 0) else "absent"]])
        headers = ["rank", "host", "role", "samples/s", "data wait %", "step ms", "cpu cores",
                   "peak RSS MiB", "GPU"]
    return "<h2>Ranks</h2>" + table(f"ranks-{idx}", headers, rows)


def diagnosis_html(run):
    d = run["data"]["diagnosis"]
    bottleneck = html.escape(d.get("bottleneck", "unknown"))
    lines = [d.get("headline", "")] + list(d.get("notes", []))
    colour = "#d9534f" if bottleneck == "input" else "#5cb85c"
    return (f'<div class="diag" style="border-left-color: {colour}" data-bottleneck="{bottleneck}"'
            f' data-stage="{html.escape(d.get("stage", ""))}"><b>Bottleneck: {bottleneck}</b>'
            + "".join(f"<br>{html.escape(l)}" for l in lines if l) + "</div>")


def unfinished_html(run):
    files = run["data"].get("unfinished", [])
    if not files:
        return ""
    return ("<p class=\"unfinished\">Processes that claimed a file but never wrote it (killed, "
            "crashed or still running): " + ", ".join(html.escape(os.path.basename(f))
                                                       for f in files) + "</p>")


def run_section(run, idx, images_html=""):
    d = run["data"]
    return (f'<section class="run" data-run="{html.escape(run["label"])}">'
            f"<h1>Batchcast telemetry: {html.escape(run['label'])}</h1>"
            f"<p>Source: {html.escape(d.get('source', ''))}; {len(d.get('files', []))} "
            f"telemetry file(s), {len(run['ranks'])} rank(s).</p>"
            + unfinished_html(run) + diagnosis_html(run) + job_html(run, idx)
            + trials_html(run, idx) + nodes_html(run, idx) + ranks_html(run, idx)
            + models_html(run["ranks"]) + images_html
            + f"<h2>Summary as printed</h2><pre>{html.escape(d.get('summary_text', ''))}</pre>"
            + annotations_html(run["ranks"]) + "</section>")


STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 1200px; }
.diag { padding: 1em; border-left: 6px solid #5cb85c; background: #f7f7f7; }
table { border-collapse: collapse; margin: 0.5em 0 1em 0; }
td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: right; font-size: small; }
td.na { color: #888; }
img { max-width: 100%; } figure { margin: 1em 0; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: small; }
"""


def page(title, body, payload):
    # The numbers of the tables and plots, machine-readable (also in report.json).
    blob = json.dumps(payload).replace("</", "<\\/")
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}'
            f"</title><style>{STYLE}</style></head><body>{body}"
            f'<script type="application/json" id="report-data">{blob}</script></body></html>\n')


def evaluations_html(runs):
    rows = []
    for run in runs:
        for r in run["ranks"]:
            pts = evals(r)
            if not pts:
                continue
            best = max(p[4] for p in pts)
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in [
                run["label"], label(r), len(pts), fmt(pts[-1][0]), fmt(100 * pts[-1][4], ".2f"),
                fmt(100 * best, ".2f"), fmt(pts[-1][3], ".0f")]) + "</tr>")
    if not rows:
        return ""
    return ("<h2>Evaluations</h2><table><tr><th>run</th><th>trainer</th><th>evaluations</th>"
            "<th>last at training s</th><th>final accuracy %</th><th>best accuracy %</th>"
            "<th>samples trained</th></tr>" + "".join(rows) + "</table>")


def compare_html(runs):
    """The runs side by side: the job table with a column per run (and B/A for two), and
    every trial's cost in every run."""
    if not all(run["data"].get("job") for run in runs):
        return ""
    headers = ["metric"] + [run["label"] for run in runs] + (
        [f"{runs[1]['label']} / {runs[0]['label']}"] if len(runs) == 2 else [])
    rows = []
    for name, key, spec in JOB_COLUMNS:
        vals = [run["data"]["job"].get(key) for run in runs]
        row = [cell(name)] + [cell(v, spec) for v in vals]
        if len(runs) == 2:
            a, b = vals
            row.append(cell(b / a if isinstance(a, (int, float)) and isinstance(b, (int, float))
                            and a else None, ".2f"))
        rows.append(row)
    rows.append([cell("bottleneck")] + [cell(run["data"]["diagnosis"]["bottleneck"])
                                        for run in runs] + ([cell("")] if len(runs) == 2 else []))
    out = "<h2>Runs side by side</h2>" + table("compare-job", headers, rows)
    names = trial_names(runs)
    if names:
        cols = ["samples sent", "end", "own CPU s", "leader CPU s", "total CPU s", "energy J"]
        th = ["trial"] + [f"{run['label']}: {c}" for run in runs for c in cols]
        trows = []
        for n in names:
            row = [cell(n)]
            for run in runs:
                t = next((x for x in run["data"].get("trials", []) if x["name"] == n), None)
                if t is None:
                    row += [cell(None)] * len(cols)
                else:
                    row += [cell(t["samples"]), cell(t["end"]), cell(t["own_cpu_s"], ".2f"),
                            cell(t["leader_cpu_s"], ".2f"), cell(t["total_cpu_s"], ".2f"),
                            cell(t["energy_j"])]
            trows.append(row)
        out += "<h2>Cost per trial, run by run</h2>" + table("compare-trials", th, trows)
    return out


def annotations_html(ranks):
    parts = [f"<h3>rank {r['attrs']['rank']} ({r['attrs']['role']})</h3>"
             f"<pre>{html.escape(text(r['attrs'].get('annotations', '')))}</pre>"
             for r in ranks if text(r["attrs"].get("annotations", ""))]
    if not parts:
        return ""
    return ("<h2>Annotations (progressive-resizing plan, sizes / batch sizes / LR factors per "
            "epoch, evaluations)</h2>" + "".join(parts))


def image_html(images):
    figs = []
    for name, png in images:
        with open(png, "rb") as fh:
            data = base64.b64encode(fh.read()).decode()
        figs.append(f'<figure data-plot="{name}"><img alt="{name}" '
                    f'src="data:image/png;base64,{data}"><figcaption>{name}</figcaption></figure>')
    return "".join(figs)


def load_profile(path):
    """A `batchcast profile --json` file, or None when `path` is not one."""
    if not path.endswith(".json"):
        return None
    with open(path) as f:
        j = json.load(f)
    if not isinstance(j, dict) or not isinstance(j.get("strategies"), list):
        raise ValueError("not a `batchcast profile --json` file (no \"strategies\" list)")
    return j


def plot_profile(prof, out, dpi):
    """CPU-ms per sample against stored MiB per strategy; returns [(name, png)]."""
    rows = prof["strategies"]
    best = prof.get("recommended", -1)
    full = prof.get("extrapolated", False)
    key = "storage_bytes_full" if full else "storage_bytes"
    fig, ax = plt.subplots(figsize=(FIG_W_IN, FIG_H_IN))
    w = prof.get("weights", [0, 0, 1])
    ax.set_title(f"batchcast profile: {os.path.basename(str(prof.get('dataset', '')))}, "
                 f"{prof.get('samples')} of {prof.get('full_samples')} samples; "
                 f"weights p={w[0]:g} s={w[1]:g} t={w[2]:g}")
    ax.set_xlabel("online CPU per sample (ms, epochs after the first)")
    ax.set_ylabel("storage (MiB" + (", extrapolated to the full dataset)" if full else ")"))
    ax.grid(True, alpha=0.3)
    forms = sorted({r["form"] for r in rows})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, form in enumerate(forms):
        for cache in (False, True):
            pick = [r for r in rows if r["form"] == form and bool(r["cache"]) == cache]
            if not pick:
                continue
            c = colours[i % len(colours)]
            ax.scatter([1e3 * r["cpu_s_per_sample"] for r in pick],
                       [r[key] / 2**20 for r in pick],
                       s=[30 + 15 * int(r["threads"]) for r in pick],
                       facecolors=c if cache else "none", edgecolors=c,
                       label=f"{form}, cache {'on' if cache else 'off'}")
    if 0 <= best < len(rows):
        r = rows[best]
        ax.scatter([1e3 * r["cpu_s_per_sample"]], [r[key] / 2**20], marker="*", s=400,
                   color="black", zorder=5,
                   label=f"recommended: {r['form']} ({r['compression']}), cache "
                         f"{'on' if r['cache'] else 'off'}, {r['threads']} threads")
    ax.set_yscale("log")
    images = []
    finish(fig, ax, out, "profile", dpi, images)
    return images


def write_profile_html(prof, images, out, source):
    rows = prof["strategies"]
    best = prof.get("recommended", -1)
    head = ("form", "compression", "cache", "threads", "offline_s", "storage_bytes",
            "samples_per_s", "cpu_s_per_sample", "score")
    table = "".join(
        "<tr{}>{}</tr>".format(' style="font-weight:bold"' if i == best else "",
                                "".join(f"<td>{html.escape(str(r.get(k)))}</td>" for k in head))
        for i, r in enumerate(rows))
    page = os.path.join(out, "profile.html")
    with open(page, "w") as f:
        f.write(f"<html><head><meta charset='utf-8'><title>batchcast profile</title></head><body>"
                f"<h1>batchcast profile</h1><p>{html.escape(source)}</p>"
                f"<p>apply: <code>{html.escape(str(prof.get('command', '')))}</code></p>"
                f"{image_html(images)}<table border='1'><tr>"
                + "".join(f"<th>{k}</th>" for k in head) + f"</tr>{table}</table></body></html>")
    return page


def display_names(ranks, files):
    """Plot labels: "rank N role" in one file; "<kind> pid P" across a run directory."""
    if len(files) <= 1:
        return
    for r in ranks:
        a = r["attrs"]
        kind = os.path.basename(r["file"]).split("-")[0]
        who = f"{kind} pid {a.get('pid', '?')}"
        if kind == "job":
            who = f"job rank {a['rank']} {a['role']}"
        elif kind == "leader" and a["role"] == "consumer":  # a Python Leader's own Consumer
            who = f"consumer pid {a.get('pid', '?')}"
        r["display"] = who + (f" ({a['run']})" if a.get("run") else "")


def load_runs(args, labels):
    """[{label, data, ranks}] from the CLI's --data, or from the files alone."""
    runs = []
    if args.data:
        with open(args.data) as fh:
            datas = json.load(fh)
        for data in datas:
            ranks = []
            for f in data["files"]:
                _, rs = load(f)
                ranks.extend(rs)
            display_names(ranks, data["files"])
            runs.append({"label": data["label"], "data": data, "ranks": ranks})
        return runs
    for path, run_label in zip(args.runs, labels):
        if os.path.isdir(path):
            raise ValueError(f"{path} is a run directory: render it with `batchcast report "
                             f"{path}`, which merges its files")
        root, ranks = load(path)
        if not ranks:
            raise ValueError(f"{path} holds no rank groups")
        diag = text(root.get("diagnosis", "")).split("\n")
        data = {"label": run_label, "source": os.path.abspath(path), "files": [path],
                "unfinished": [], "summary_text": text(root.get("summary", "")),
                "diagnosis": {"bottleneck": text(root.get("bottleneck", "unknown")),
                              "stage": text(root.get("bottleneck_stage", "")),
                              "headline": diag[0], "notes": diag[1:]},
                "trials": []}
        runs.append({"label": run_label, "data": data, "ranks": ranks})
    return runs


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="run directories or telemetry HDF5 files, or one "
                                           "`batchcast profile --json` file")
    p.add_argument("--out", help="output directory (default: <first run>_report)")
    p.add_argument("--labels", help="comma-separated run names for several runs "
                                    "(default: the file or directory names)")
    p.add_argument("--data", help="the merged tables from `batchcast report` (JSON)")
    p.add_argument("--dpi", type=int, default=100, help="PNG resolution (default 100: 1000x400)")
    args = p.parse_args(argv)
    first = args.runs[0].rstrip("/")
    out = args.out or os.path.splitext(first)[0] + "_report"
    labels = args.labels.split(",") if args.labels else [
        os.path.splitext(os.path.basename(h.rstrip("/")))[0] for h in args.runs]
    if len(labels) != len(args.runs):
        print(f"batchcast report: {len(labels)} labels for {len(args.runs)} runs; give one "
              "label per run", file=sys.stderr)
        return 2
    try:
        prof = load_profile(args.runs[0]) if len(args.runs) == 1 else None
    except (OSError, ValueError) as e:
        print(f"batchcast report: cannot read {args.runs[0]}: {e}", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    if prof is not None:
        images = plot_profile(prof, out, args.dpi)
        page_path = write_profile_html(prof, images, out, os.path.abspath(args.runs[0]))
        print(f"batchcast report: profile of {len(prof['strategies'])} strategies: "
              f"{len(images)} plot (PNG + SVG) and {page_path}")
        return 0
    try:
        runs = load_runs(args, labels)
    except (OSError, ValueError, KeyError) as e:
        print(f"batchcast report: cannot read the run: {e}", file=sys.stderr)
        return 2
    if len(runs) > 1:
        images = plot_compare(runs, out, args.dpi)
        body = (f"<h1>Batchcast telemetry: {len(runs)} runs compared</h1>"
                + compare_html(runs) + evaluations_html(runs)
                + f"<h2>Plots</h2>{image_html(images)}"
                + "".join(run_section(run, i) for i, run in enumerate(runs)))
        payload = {"runs": [run["data"] for run in runs], "plots": [n for n, _ in images]}
        title = "Batchcast telemetry: comparison"
    else:
        run = runs[0]
        images, stages = plot_all(run["ranks"], out, args.dpi, run["data"]["diagnosis"],
                                  run["data"].get("trials", []))
        body = run_section(run, 0, "<h2>Plots</h2>" + image_html(images))
        payload = {"runs": [run["data"]], "stages": stages, "plots": [n for n, _ in images]}
        title = f"Batchcast telemetry: {run['label']}"
        for name, metrics in model_series(run["ranks"]).items():
            e, loss, acc, sps, ms, rss = model_row(metrics)
            points = ", ".join(f"{k} {len(v[2])}" for k, v in sorted(metrics.items()))
            print(f"model {name}: {e} epochs, last epoch loss {loss:.4f}, last epoch accuracy "
                  f"{acc:.4f}, {sps:.0f} samples/s, {ms:.2f} ms/step, peak RSS {rss:.0f} MiB; "
                  f"points: {points}")
    with open(os.path.join(out, "report.json"), "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=1)
    page_path = os.path.join(out, "report.html")
    with open(page_path, "w", encoding="utf-8") as fh:
        fh.write(page(title, body, payload))
    what = f"{len(runs)} runs compared: " if len(runs) > 1 else ""
    print(f"batchcast report: {what}{len(images)} plots (PNG + SVG) and {page_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
