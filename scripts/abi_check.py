#!/usr/bin/env python3
# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""ABI check of libbatchcast.so against the baseline of the last release (docs/api.md).

    abi_check.py LIB ABI_LAYOUT BASELINE            check (ctest abi_check)
    abi_check.py LIB ABI_LAYOUT BASELINE --update   write the baseline (at a release)

The ABI is the SONAME, the exported dynamic symbols (nm -D) and the layout of the public
structs (printed by the abi_layout program built from the public headers). While the SONAME
is the baseline's, a release must keep every exported symbol (C++ symbols carry their
parameter types, so a changed signature is a removed symbol), every public C++ struct's size,
alignment and field offsets, and every field of the C API's size-prefixed structs (those may
grow at the end: fields are appended, never moved). Added symbols are fine. A new SONAME
(BATCHCAST_VERSION_MINOR bumped while MAJOR is 0, MAJOR after) allows any change; the
baseline is then refreshed with --update when that version is released.
Runs in well under a second: one nm and one small program.
"""
import json
import subprocess
import sys

# C structs that start with struct_size: they may grow at the end.
GROWABLE = {"bc_consumer_config_t", "bc_batch_info_t", "bc_leader_config_t", "bc_position_t",
            "bc_ragged_t"}


def soname(lib):
    out = subprocess.run(["objdump", "-p", lib], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "SONAME":
            return parts[1]
    sys.exit(f"abi_check: {lib} has no SONAME: set SOVERSION on the batchcast target")


def symbols(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        # Code and data the API exports; GCC's unique/weak template instances come and go
        # with inlining and are not part of the contract.
        if len(parts) == 3 and parts[1] in ("T", "D", "B", "R"):
            syms.add(parts[2])
    return sorted(syms)


def current(lib, layout_prog):
    layout = json.loads(subprocess.run([layout_prog], check=True, capture_output=True,
                                       text=True).stdout)
    return {"soname": soname(lib), "symbols": symbols(lib), "structs": layout}


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True,
                         text=True).stdout
    return out.splitlines()


def compare(base, cur):
    problems = []
    removed = sorted(set(base["symbols"]) - set(cur["symbols"]))
    for mangled, readable in zip(removed, demangle(removed)):
        problems.append(f"symbol removed or its signature changed: {readable} ({mangled})")
    for name, b in base["structs"].items():
        c = cur["structs"].get(name)
        if c is None:
            problems.append(f"struct {name} is gone")
            continue
        grow = name in GROWABLE
        if c["align"] != b["align"]:
            problems.append(f"struct {name}: alignment {b['align']} -> {c['align']}")
        if (c["size"] < b["size"]) if grow else (c["size"] != b["size"]):
            problems.append(f"struct {name}: size {b['size']} -> {c['size']}"
                            + ("" if grow else " (a by-value C++ struct: fields cannot be added"
                               " without a new SONAME)"))
        for field, off in b["fields"].items():
            if field not in c["fields"]:
                problems.append(f"struct {name}: field {field} is gone")
            elif c["fields"][field] != off:
                problems.append(f"struct {name}: field {field} moved from offset {off} to "
                                f"{c['fields'][field]}")
    added = sorted(set(cur["symbols"]) - set(base["symbols"]))
    return problems, added


def main(argv):
    if len(argv) not in (4, 5) or (len(argv) == 5 and argv[4] != "--update"):
        sys.exit(__doc__)
    lib, layout_prog, baseline = argv[1:4]
    cur = current(lib, layout_prog)
    if len(argv) == 5:
        with open(baseline, "w") as f:
            json.dump(cur, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"abi_check: wrote {baseline} for {cur['soname']} ({len(cur['symbols'])} symbols)")
        return 0
    with open(baseline) as f:
        base = json.load(f)
    problems, added = compare(base, cur)
    for p in problems:
        print(f"abi_check: {p}")
    if added:
        print(f"abi_check: {len(added)} symbol(s) added (compatible)")
    if not problems:
        print(f"abi_check: {cur['soname']} keeps the ABI of the baseline ({base['soname']})")
        return 0
    if cur["soname"] != base["soname"]:
        print(f"abi_check: ok: the SONAME changed ({base['soname']} -> {cur['soname']}), so these "
              f"changes are allowed; refresh {baseline} with --update when this version is released")
        return 0
    print(f"abi_check: FAIL: {len(problems)} incompatible change(s) under the same SONAME "
          f"{cur['soname']}. Either keep the ABI (append C struct fields at the end, keep old "
          f"symbols), or bump BATCHCAST_VERSION_MINOR in runtime/include/batchcast/version.h "
          f"(MAJOR from 1.0 on), which changes the SONAME (docs/api.md \"ABI policy\").")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
