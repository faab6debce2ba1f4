#!/usr/bin/env python3
"""Regenerates the generated parts of docs/ from the code, so they cannot drift:

  docs/configuration.md        from `batchcast info -c` (the options registry)
  docs/troubleshooting.md      the "every error message" appendix, from the sources

Usage: gen_docs.py BATCHCAST_BIN [--check]   (--check: exit 1 if a file would change)
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- generated: error messages (scripts/gen_docs.py) -->"


def configuration(binary):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHCAST_")}
    out = subprocess.run([binary, "info", "-c"], check=True, capture_output=True, text=True,
                         env=env).stdout
    rows = json.loads(out)
    lines = [
        "# Configuration reference",
        "",
        "Generated from the options registry (`runtime/core/options.cc`) by",
        "`scripts/gen_docs.py`; `batchcast info -c` prints the same with current values.",
        "",
        "Each option can be set, later wins: built-in default < config file (`--config FILE`",
        "or `BATCHCAST_CONFIG`, lines of `key = value`, `#` comments) < environment variable",
        "`BATCHCAST_<KEY>` < command-line flag `--key=value` (dashes or underscores) < a field",
        "assigned in code after `ResolveOptions()`. Sizes accept k/m/g suffixes, durations",
        "ms/s/m. Logging is configured separately: `BATCHCAST_DEBUG`, `BATCHCAST_DEBUG_SUBSYS`,",
        "`BATCHCAST_DEBUG_FILE` (docs/architecture.md).",
        "",
        "*Read by* is the option's scope in the registry (`runtime/core/option_scope.h`).",
        "Front doors that configure one program's leader and consumers with one options string",
        "(the MPI Runtime, `batchcast-run`, the C API) accept every option. A consumer's own",
        "front door (the Python `Consumer`) refuses `leader` options set in code, the Python",
        "`Leader` refuses `consumers` options set in code, and a `batchcast.Producer`, which",
        "runs no decode pipeline, refuses the `leader` options it does not read from any",
        "source (docs/python.md).",
        "",
        "| option | environment | read by | type | default | description |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        default = r["default"] if r["default"] != "" else "(empty)"
        help_text = r["help"].replace("|", "\\|")
        type_text = r["type"].replace("|", " \\| ")
        scope = {"all": "leader, consumers", "leader": "leader", "consumer": "consumers"}[r["scope"]]
        lines.append(f"| `{r['key']}` | `{r['env']}` | {scope} | {type_text} | `{default}` "
                     f"| {help_text} |")
    return "\n".join(lines) + "\n"


ERROR_CALL = re.compile(
    r'(?:InvalidArgument|NotFound|Io|CorruptData|OutOfRange|ResourceExhausted|Unavailable|'
    r'FailedPrecondition|PermissionDenied|DeadlineExceeded|Cancelled|Internal|Errno)Error\('
    r'(?:[^,"]*,\s*)?\s*"((?:[^"\\]|\\.)*)"(?:\s*"((?:[^"\\]|\\.)*)")*')


def error_messages():
    found = {}
    for top in ("runtime", "launcher", "bindings"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if not f.endswith((".cc", ".h", ".cu")) or f.endswith("_test.cc"):
                    continue
                path = os.path.join(dirpath, f)
                text = open(path, encoding="utf-8").read()
                # Join adjacent string literals split over lines.
                text = re.sub(r'"\s*\n\s*"', "", text)
                for m in ERROR_CALL.finditer(text):
                    msg = m.group(1)
                    if len(msg) < 12:
                        continue
                    rel = os.path.relpath(path, ROOT)
                    found.setdefault(rel.split("/")[1] if rel.startswith("runtime/") else rel.split("/")[0], set()).add(msg)
    lines = [BEGIN, "", "## Every error message", "",
             "Extracted from the sources; `{}` stands for a value filled in at run time.", ""]
    for area in sorted(found):
        lines.append(f"### {area}")
        lines.append("")
        for msg in sorted(found[area]):
            lines.append(f"- `{msg}`")
        lines.append("")
    return "\n".join(lines)


def main():
    binary = sys.argv[1]
    check = "--check" in sys.argv
    changed = []
    cfg_path = os.path.join(ROOT, "docs", "configuration.md")
    new_cfg = configuration(binary)
    ts_path = os.path.join(ROOT, "docs", "troubleshooting.md")
    old_ts = open(ts_path, encoding="utf-8").read() if os.path.exists(ts_path) else ""
    head = old_ts.split(BEGIN)[0] if BEGIN in old_ts else old_ts
    new_ts = head.rstrip("\n") + "\n\n" + error_messages()
    for path, new in ((cfg_path, new_cfg), (ts_path, new_ts)):
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if old != new:
            changed.append(os.path.relpath(path, ROOT))
            if not check:
                open(path, "w", encoding="utf-8").write(new)
    if check and changed:
        print("out of date (run scripts/gen_docs.py BUILD/bin/batchcast): " + ", ".join(changed))
        return 1
    print("docs up to date" if not changed else "regenerated: " + ", ".join(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
