#!/usr/bin/env python3
# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Compiles, syntax only, every benchmark translation unit that this build tree did not compile
(ctest `benchmarks_syntax`).

A tree that `make test` configures leaves the benchmarks no test runs out of `all`
(BATCHCAST_BENCHMARKS_IN_ALL=OFF, docs/testing.md "Session 15"), and bench_stage (LibTorch) is
never in it. So that a change which breaks one of them still fails CI, this runs each of their
compile commands from compile_commands.json with -fsyntax-only instead of -c and -o: the
compiler's errors, about a third of a full compile's CPU. What it cannot see is a link error.

usage: syntax_check.py BUILD_DIR
"""
import json
import os
import shlex
import subprocess
import sys


def main():
    build = sys.argv[1]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    bench_dir = os.path.join(build, "benchmarks")
    checked, compiled, failed = [], [], []
    for e in entries:
        args = e.get("arguments") or shlex.split(e["command"])
        out = args[args.index("-o") + 1] if "-o" in args else ""
        obj = os.path.join(e["directory"], out)
        if not os.path.abspath(obj).startswith(bench_dir + os.sep):
            continue
        name = os.path.relpath(obj, bench_dir).split(os.sep)[1].removesuffix(".dir")
        if os.path.exists(obj):
            compiled.append(name)
            continue
        if os.path.basename(args[0]) == "ccache":
            args = args[1:]
        i = args.index("-o")
        args = args[:i] + args[i + 2:]
        args = ["-fsyntax-only" if a == "-c" else a for a in args]
        r = subprocess.run(args, cwd=e["directory"], capture_output=True, text=True)
        (checked if r.returncode == 0 else failed).append(name)
        if r.returncode != 0:
            sys.stderr.write(f"benchmarks_syntax: {name} ({e['file']}) does not compile:\n"
                             f"{r.stderr[-6000:]}\n")
    print(f"benchmarks_syntax: checked {len(checked) + len(failed)} not built by this tree "
          f"({', '.join(sorted(checked + failed)) or 'none'}); compiled by the build: "
          f"{', '.join(sorted(compiled)) or 'none'}")
    if not checked and not failed and not compiled:
        print("benchmarks_syntax: no benchmark in compile_commands.json", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
