# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Prints this interpreter's platlib (site-packages) directory relative to an install prefix,
e.g. lib/python3.11/dist-packages (Debian) or lib/python3.11/site-packages (a venv)."""
import sysconfig

get_scheme = getattr(sysconfig, "get_default_scheme", None) or sysconfig._get_default_scheme
scheme = get_scheme()
path = sysconfig.get_path("platlib", scheme, vars={"base": "/", "platbase": "/"}).lstrip("/")
# Debian's default scheme for /usr/bin/python3 is "{base}/local/lib/..." with base=/usr: its
# "local/" is the /local of the default prefix /usr/local, not a directory under any prefix.
if scheme == "posix_local" and path.startswith("local/"):
    path = path[len("local/"):]
print(path)
