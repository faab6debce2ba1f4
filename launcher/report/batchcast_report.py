#!/usr/bin/python3
# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Render a Batchcast telemetry file (docs/telemetry-format.md) as plots and one HTML page.

    batchcast report RUN.h5 [--out DIR]          (the CLI runs this script)
    batchcast report A.h5 B.h5 [--labels a,b] [--out DIR]
    /usr/bin/python3 batchcast_report.py RUN.h5 [--out DIR] [--dpi 100]

Writes DIR/<plot>.png and DIR/<plot>.svg for throughput, data_wait, cpu, rss, stages,
(when any rank had a GPU) gpu, (with a progressive-resizing schedule) resize: image size,
batch size and LR factor over time, (when trainers reported evaluations) accuracy, (with
batchcast train-many's model/<name>/... named series) models: loss, accuracy and samples/s
per model over time, and
DIR/report.html with every image inlined (base64 PNG), the summary table, the diagnosis and
the annotations (the resize plan, each epoch's sizes, batch sizes and LR factors).
With several files it compares the runs: accuracy over training time and over wall time,
and image size / LR factor over time, one line per run (e.g. with and without a schedule).
A `batchcast profile --json` file instead (docs/profiler.md) gives DIR/profile.png/.svg:
every strategy's CPU per sample against its storage, one colour per stored form, filled
markers with the decoded-sample cache, the recommendation starred, and DIR/profile.html.
Needs h5py, numpy and matplotlib.
"""
import json
import argparse
import base64
import html
import os
import re
import sys

import h5py
import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIG_W_IN, FIG_H_IN = 10.0, 4.0  # at --dpi 100: 1000 x 400 pixel PNGs
STAGES = ["read", "decode", "transform", "collate", "publish", "exchange"]


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
            ranks.append({"name": name, "attrs": attrs, "series": series, "named": named})
    return root, ranks


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


def plot_all(ranks, out, dpi):
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

    fig, ax = plt.subplots(figsize=(FIG_W_IN, FIG_H_IN))
    ax.set_title("where the time went (seconds per rank, summed over threads)")
    names = STAGES + ["data_wait", "step"]
    bottom = np.zeros(len(ranks))
    for stage in names:
        vals = np.array([r["series"][stage + "_ns"][-1] / 1e9 if len(r["series"]["time_s"]) else 0.0
                         for r in ranks])
        if vals.sum() > 0:
            ax.bar([label(r) for r in ranks], vals, bottom=bottom, label=stage)
            bottom += vals
    ax.set_ylabel("seconds")
    ax.grid(True, axis="y", alpha=0.3)
    finish(fig, ax, out, "stages", dpi, images)
    plot_resize(ranks, out, dpi, images, t0)
    plot_models(ranks, out, dpi, images, t0)
    plot_accuracy([("", None, ranks)], out, dpi, images)
    return images


def plot_compare(runs, out, dpi):
    """Plots comparing several runs (with and without a resize schedule, say)."""
    images = []
    plot_accuracy(runs, out, dpi, images)
    for name, ylabel in RESIZE_GAUGES:
        scheduled = [(run_label, r) for run_label, _, ranks in runs for r in ranks
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
    fig, ax = new_figure("throughput of the trainers", "samples / s")
    for run_label, _, ranks in runs:
        for r in ranks:
            if is_consumer(r):
                t, v = rate(r["series"]["time_s"], r["series"]["samples_received"])
                ax.plot(t, v, label=f"{run_label}: {label(r)}")
    finish(fig, ax, out, "compare_throughput", dpi, images)
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
        figs.append(f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{name}</figcaption></figure>")
    return "".join(figs)


def write_compare_html(runs, images, out):
    rows = []
    for run_label, root, ranks in runs:
        for r in ranks:
            pts = evals(r)
            if not pts:
                continue
            best = max(p[4] for p in pts)
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in [
                run_label, label(r), len(pts), fmt(pts[-1][0]), fmt(100 * pts[-1][4], ".2f"),
                fmt(100 * best, ".2f"), fmt(pts[-1][3], ".0f")]) + "</tr>")
    sections = "".join(
        f"<h2>{html.escape(run_label)}</h2><p>source: {html.escape(root.get('_source', ''))}</p>"
        f"<pre>{html.escape(text(root.get('summary', '')))}</pre>" + annotations_html(ranks)
        for run_label, root, ranks in runs)
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Batchcast telemetry: comparison</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
img {{ max-width: 100%; }} pre {{ background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: small; }}
</style></head><body>
<h1>Batchcast telemetry: {len(runs)} runs compared</h1>
<table><tr><th>run</th><th>trainer</th><th>evaluations</th><th>last at training s</th>
<th>final accuracy %</th><th>best accuracy %</th><th>samples trained</th></tr>
{''.join(rows)}</table>
{models_html(ranks)}
<h2>Plots</h2>
{image_html(images)}
{sections}
</body></html>
"""
    path = os.path.join(out, "report.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path


def write_html(root, ranks, images, out, source):
    rows = []
    for r in ranks:
        a = r["attrs"]
        rows.append(
            "<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in [
                a["rank"], a["host"], a["role"], fmt(a.get("samples_per_s")),
                fmt(a.get("data_wait_pct")), fmt(a.get("step_ms"), ".2f"),
                fmt(a.get("cpu_cores"), ".2f"), fmt(a.get("peak_rss_bytes", 0) / 2**20, ".0f"),
                text(a.get("gpu_name", "-")) if a.get("gpu_present", 0) else "absent"]) + "</tr>")
    figs = [image_html(images)]
    bottleneck = html.escape(text(root.get("bottleneck", "unknown")))
    diagnosis = html.escape(text(root.get("diagnosis", ""))).replace("\n", "<br>")
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Batchcast telemetry: {html.escape(text(root.get('run', '')))}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
.diag {{ padding: 1em; border-left: 6px solid {'#d9534f' if bottleneck == 'input' else '#5cb85c'}; background: #f7f7f7; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
img {{ max-width: 100%; }} pre {{ background: #f7f7f7; padding: 1em; overflow-x: auto; }}
</style></head><body>
<h1>Batchcast telemetry</h1>
<p>experiment <b>{html.escape(text(root.get('experiment', '')) or '-')}</b>,
workload <b>{html.escape(text(root.get('workload', '')) or '-')}</b>,
run <b>{html.escape(text(root.get('run', '')) or '-')}</b>,
{len(ranks)} ranks, {fmt(root.get('wall_s'))} s. Source: {html.escape(source)}</p>
<div class="diag"><b>Bottleneck: {bottleneck}</b><br>{diagnosis}</div>
<h2>Ranks</h2>
<table><tr><th>rank</th><th>host</th><th>role</th><th>samples/s</th><th>data wait %</th>
<th>step ms</th><th>cpu cores</th><th>peak RSS MiB</th><th>GPU</th></tr>
{''.join(rows)}</table>
{models_html(ranks)}
<h2>Plots</h2>
{''.join(figs)}
<h2>Summary as printed</h2>
<pre>{html.escape(text(root.get('summary', '')))}</pre>
{annotations_html(ranks)}
</body></html>
"""
    path = os.path.join(out, "report.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path


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


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("h5", nargs="+", help="telemetry HDF5 file(s) (telemetry(hdf5=...)), or one "
                                         "`batchcast profile --json` file")
    p.add_argument("--out", help="output directory (default: <first file>_report)")
    p.add_argument("--labels", help="comma-separated run names for several files "
                                    "(default: the file names)")
    p.add_argument("--dpi", type=int, default=100, help="PNG resolution (default 100: 1000x400)")
    args = p.parse_args(argv)
    out = args.out or os.path.splitext(args.h5[0])[0] + "_report"
    labels = args.labels.split(",") if args.labels else [
        os.path.splitext(os.path.basename(h))[0] for h in args.h5]
    if len(labels) != len(args.h5):
        print(f"batchcast report: {len(labels)} labels for {len(args.h5)} files; give one "
              "label per file", file=sys.stderr)
        return 2
    try:
        prof = load_profile(args.h5[0]) if len(args.h5) == 1 else None
    except (OSError, ValueError) as e:
        print(f"batchcast report: cannot read {args.h5[0]}: {e}", file=sys.stderr)
        return 2
    if prof is not None:
        os.makedirs(out, exist_ok=True)
        images = plot_profile(prof, out, args.dpi)
        page = write_profile_html(prof, images, out, os.path.abspath(args.h5[0]))
        print(f"batchcast report: profile of {len(prof['strategies'])} strategies: "
              f"{len(images)} plot (PNG + SVG) and {page}")
        return 0
    runs = []
    for h5, run_label in zip(args.h5, labels):
        try:
            root, ranks = load(h5)
        except (OSError, ValueError, KeyError) as e:
            print(f"batchcast report: cannot read {h5}: {e}", file=sys.stderr)
            return 2
        if not ranks:
            print(f"batchcast report: {h5} holds no rank groups", file=sys.stderr)
            return 2
        root["_source"] = os.path.abspath(h5)
        runs.append((run_label, root, ranks))
    os.makedirs(out, exist_ok=True)
    if len(runs) > 1:
        images = plot_compare(runs, out, args.dpi)
        page = write_compare_html(runs, images, out)
        print(f"batchcast report: {len(runs)} runs compared: {len(images)} plots and {page}")
        return 0
    root, ranks = runs[0][1], runs[0][2]
    images = plot_all(ranks, out, args.dpi)
    page = write_html(root, ranks, images, out, os.path.abspath(args.h5[0]))
    for name, metrics in model_series(ranks).items():
        e, loss, acc, sps, ms, rss = model_row(metrics)
        points = ", ".join(f"{k} {len(v[2])}" for k, v in sorted(metrics.items()))
        print(f"model {name}: {e} epochs, last epoch loss {loss:.4f}, last epoch accuracy "
              f"{acc:.4f}, {sps:.0f} samples/s, {ms:.2f} ms/step, peak RSS {rss:.0f} MiB; "
              f"points: {points}")
    print(f"batchcast report: {len(images)} plots (PNG + SVG) and {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
