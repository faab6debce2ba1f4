# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Fixtures for the Python binding tests: the Fashion-MNIST files, helper processes."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("BCTEST_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))


@pytest.fixture(scope="session")
def fmnist():
    """Paths of fashion-mnist-{train,test}.h5 (raw), converted once per build directory."""
    out = os.environ.get("BCTEST_DATA") or os.path.join(SOURCE, "data")
    train = os.path.join(out, "fashion-mnist-train.h5")
    test = os.path.join(out, "fashion-mnist-test.h5")
    if not (os.path.exists(train) and os.path.exists(test)):
        cmd = ["bash", os.path.join(SOURCE, "scripts", "fashion_mnist.sh"), out]
        if os.environ.get("BCTEST_BIN"):
            cmd.append(os.environ["BCTEST_BIN"])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return {"train": train, "test": test}


def read_h5(path):
    import h5py
    with h5py.File(path, "r") as f:
        return f["images"][:], f["labels"][:]


def spawn(script, *args, env=None):
    """Starts tests/python/<script> with this interpreter; stdout is a pipe of JSON lines."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), HERE) if p)
    e.update(env or {})
    return subprocess.Popen([sys.executable, os.path.join(HERE, script), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)


def finish(proc, timeout=600):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{proc.args} failed ({proc.returncode}):\n{err[-4000:]}"
    lines = [l for l in out.splitlines() if l.startswith("{")]
    assert lines, f"{proc.args} printed no JSON:\n{out[-2000:]}\n{err[-2000:]}"
    return json.loads(lines[-1])


def read_address(proc):
    """The first JSON line of a helper that serves: {"address": ...}."""
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"helper exited before printing its address: {proc.stderr.read()}")
    return json.loads(line)["address"]


def one_line_changed(script, line, replacement, out_dir):
    """A copy of `script` in `out_dir` with its one occurrence of `line` replaced: the
    documented one-line change of a training script (docs/python.md, "Before and after")."""
    with open(script) as f:
        text = f.read()
    assert text.count(line) == 1, f"{script} must hold the line to change exactly once"
    changed = os.path.join(str(out_dir), os.path.basename(script).replace(".py", "_batchcast.py"))
    with open(changed, "w") as f:
        f.write(text.replace(line, replacement))
    return changed
