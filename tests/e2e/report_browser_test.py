#!/usr/bin/python3
# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""The report is a page people open (issue 32): the comparison page of the telemetry sweep
(e2e_telemetry_sweep's WORK/report) opened in headless Chromium (Debian's `chromium`,
installed by scripts/deps.sh). Checks, in what the browser rendered (its DOM after load):
  - every plot the report says it drew is a figure whose image decoded at 1000 x 400 pixels
    and takes space on the page;
  - the side-by-side job table holds the run's numbers (each cell's value is the merged
    data's, its text that value as printed), and the per-trial tables hold the samples each
    trial received as the services' ledgers in the HDF5 files say (read here with h5py);
  - the diagnosis box names the bottleneck the data names.
Keeps a full-page screenshot as a test artifact (SCREENSHOT, under the build tree).

    report_browser_test.py REPORT_DIR SCREENSHOT
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys

import h5py

CHECK_SCRIPT = """
<script>
window.addEventListener('load', () => {
  const figs = [...document.querySelectorAll('figure[data-plot]')].map(f => {
    const img = f.querySelector('img');
    const box = img.getBoundingClientRect();
    return {plot: f.dataset.plot, complete: img.complete, width: img.naturalWidth,
            height: img.naturalHeight, shown: box.width * box.height};
  });
  const tables = {};
  for (const t of document.querySelectorAll('table[id]'))
    tables[t.id] = [...t.rows].map(r => [...r.cells].map(
        c => ({text: c.textContent, value: c.dataset.value === undefined ? null : c.dataset.value})));
  const diag = [...document.querySelectorAll('.diag')].map(d => d.dataset.bottleneck);
  const out = document.createElement('pre');
  out.id = 'bc-check';
  out.textContent = JSON.stringify({figs, tables, diag});
  document.body.appendChild(out);
});
</script>
"""


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    fail("no chromium on PATH: scripts/deps.sh installs Debian's chromium (make deps)")


def browse(browser, url, *extra):
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--virtual-time-budget=20000", *extra, url]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=300)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    return r.stdout


def ledger_samples(files):
    """{trial name: samples} from the services' ledgers, read from the HDF5 files."""
    out = {}
    for f in files:
        with h5py.File(f, "r") as h:
            for g in h.values():
                t = g.attrs.get("trials")
                if t is None:
                    continue
                for rec in json.loads(t if isinstance(t, str) else t.decode())["trials"]:
                    out[rec["name"]] = rec["samples"]
    return out


def close(a, b):
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


def main():
    report, shot = sys.argv[1], sys.argv[2]
    page = os.path.join(report, "report.html")
    payload = json.load(open(os.path.join(report, "report.json")))
    runs = payload["runs"]
    browser = chromium()
    # The page as it is, plus a script that reads back what the browser made of it.
    src = open(page, encoding="utf-8").read()
    check = os.path.join(report, "check.html")
    with open(check, "w", encoding="utf-8") as fh:
        fh.write(src.replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = browse(browser, "file://" + os.path.abspath(check), "--dump-dom")
    m = re.search(r'<pre id="bc-check">(.*?)</pre>', dom, re.S)
    if not m:
        fail("the browser did not run the check (no #bc-check in the dumped DOM)")
    seen = json.loads(html.unescape(m.group(1)))

    drawn = {f["plot"]: f for f in seen["figs"]}
    if sorted(drawn) != sorted(payload["plots"]) or not drawn:
        fail(f"figures on the page {sorted(drawn)} != plots drawn {sorted(payload['plots'])}")
    for name, f in drawn.items():
        if not f["complete"] or (f["width"], f["height"]) != (1000, 400) or f["shown"] <= 0:
            fail(f"plot {name} did not render: {f}")

    tables = seen["tables"]
    rows = {r[0]["text"]: r[1:] for r in tables.get("compare-job", [])[1:]}
    if not rows:
        fail(f"no side-by-side job table among {sorted(tables)}")
    checked = 0
    for header, key, spec in [("trials", "trials", "d"), ("samples delivered", "samples_delivered", ".0f"),
                              ("CPU s (all processes)", "cpu_s", ".2f"),
                              ("leader CPU s to trials", "leader_cpu_s", ".2f"),
                              ("cost per trial CPU s", "cost_per_trial_cpu_s", ".2f"),
                              ("saved CPU s", "saved_cpu_s", ".2f"), ("sharing x", "sharing", ".2f")]:
        for i, run in enumerate(runs):
            want = run["job"][key]
            cell = rows[header][i]
            if want is None:
                if cell["text"] != "n/a":
                    fail(f"{header} of {run['label']}: {cell} for a value not measured")
                continue
            if cell["value"] is None or not close(cell["value"], want):
                fail(f"{header} of {run['label']}: the page holds {cell}, the data {want}")
            if cell["text"] != format(want, spec):
                fail(f"{header} of {run['label']}: printed {cell['text']!r}, expected "
                     f"{format(want, spec)!r}")
            checked += 1
    for i, run in enumerate(runs):
        truth = ledger_samples(run["files"])
        body = tables.get(f"trials-{i}", [])
        head = [c["text"] for c in body[0]] if body else []
        if not body or "samples sent" not in head:
            fail(f"no trials table for {run['label']}")
        col = head.index("samples sent")
        on_page = {r[0]["text"]: int(r[col]["text"]) for r in body[1:]}
        if on_page != truth:
            fail(f"{run['label']}: trials table {on_page} != the ledgers in the files {truth}")
        checked += len(truth)
    if seen["diag"] != [run["diagnosis"]["bottleneck"] for run in runs]:
        fail(f"diagnosis boxes {seen['diag']} != data {[r['diagnosis']['bottleneck'] for r in runs]}")

    os.makedirs(os.path.dirname(os.path.abspath(shot)), exist_ok=True)
    if os.path.exists(shot):
        os.remove(shot)
    browse(browser, "file://" + os.path.abspath(page), f"--screenshot={os.path.abspath(shot)}",
           "--window-size=1280,5000")
    with open(shot, "rb") as fh:
        head = fh.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or int.from_bytes(head[16:20], "big") != 1280:
        fail(f"no 1280-pixel-wide PNG screenshot at {shot}")
    os.remove(check)
    print(f"PASS: the report rendered in {os.path.basename(browser)}: {len(drawn)} plots, "
          f"{checked} table cells checked; screenshot {shot}")


if __name__ == "__main__":
    main()
