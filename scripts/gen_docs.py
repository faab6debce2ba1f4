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
    run = lambda *args: json.loads(subprocess.run([binary, "info", *args], check=True,
                                                  capture_output=True, text=True,
                                                  env=env).stdout)
    rows = run("-c")
    doors = run("--front-doors")
    lines = [
        "# Configuration reference",
        "",
        "Generated from the options registry (`runtime/core/options.cc`) by",
        "`scripts/gen_docs.py`; `batchcast info -c` prints the same with current values, and",
        "`batchcast info --front-doors` the front doors.",
        "",
        "Each option can be set, later wins: built-in default < config file (`--config FILE`",
        "or `BATCHCAST_CONFIG`, lines of `key = value`, `#` comments) < environment variable",
        "`BATCHCAST_<KEY>` < command-line flag `--key=value`, `--key value` or a bare `--key`",
        "for a boolean (dashes or underscores; every command line parses them alike:",
        "`batchcast-run`, `batchcast serve`, `batchcast info`, a trainer's `ResolveOptions`) < a",
        "field assigned in code after `ResolveOptions()`. Sizes accept k/m/g suffixes, durations",
        "ms/s/m. Logging is configured separately: `BATCHCAST_DEBUG`, `BATCHCAST_DEBUG_SUBSYS`,",
        "`BATCHCAST_DEBUG_FILE` (docs/architecture.md).",
        "",
        "## Front doors",
        "",
        "Every front door builds one `producer::Producer` (docs/architecture.md) and checks its",
        "options against the table below (`runtime/core/option_scope.h`): an option it does not",
        "read is refused with a message naming the option, where it was set, the front door and",
        "the front doors that read it, never accepted and ignored. A value set explicitly (in",
        "code, a keyword argument, a command-line flag) is refused wherever it is not read; a",
        "value from a `BATCHCAST_*` variable or a config file is job-wide: a leader's front door",
        "refuses it only when no consumer of its job reads it either (the MPI Runtime and",
        "`batchcast-run` configure their own trainers, so for them that is everything they do",
        "not read), and a consumer's front door leaves a leader's option to the leader. A C++ or",
        "C consumer (`Consumer::Attach`, `bc_consumer_attach`) takes its program's one options",
        "string and reads its part.",
        "",
        "| key | front door | what it is |",
        "|---|---|---|",
    ]
    for d in doors:
        lines.append(f"| `{d['key']}` | {d['name']} | {d['what']} |")
    lines += [
        "",
        "## Options",
        "",
        "*Read by* lists the front doors (keys above) that read the option.",
        "",
        "| option | environment | read by | type | default | description |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        default = r["default"] if r["default"] != "" else "(empty)"
        help_text = r["help"].replace("|", "\\|")
        type_text = r["type"].replace("|", " \\| ")
        read_by = ", ".join(r["doors"])
        lines.append(f"| `{r['key']}` | `{r['env']}` | {read_by} | {type_text} | `{default}` "
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
