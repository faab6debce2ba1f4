# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""Issue 16's acceptance check: a 2-rank DDP script (gloo) under `batchcast-run --mode shard`
sees disjoint halves of the epoch whose union is every sample once."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import HERE


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_two_ddp_ranks_see_disjoint_halves(fmnist):
    run = os.path.join(os.path.dirname(os.environ["BCTEST_BIN"]), "batchcast-run")
    # PYTHONFAULTHANDLER: a trainer killed by a signal prints where each of its Python threads
    # was (one run of session 15's fresh clones saw a trainer abort at its exit with "terminate
    # called without an active exception", once in over a hundred runs; docs/testing.md).
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONFAULTHANDLER="1")
    r = subprocess.run(["mpirun", "-n", "3", run, "--dataset", fmnist["train"],
                        "--batch-size", "32", "--epochs", "1", "--mode", "shard",
                        "--limit-samples", "512", "--",
                        sys.executable, os.path.join(HERE, "ddp_trainer.py")],
                       capture_output=True, text=True, env=env, timeout=600)
    # stderr first: a failure's first lines (what make test's summary shows) say what failed.
    assert r.returncode == 0, r.stderr[-4000:] + "\n--- stdout, its end ---\n" + r.stdout[-600:]
    ids = json.loads([l for l in r.stdout.splitlines() if l.startswith('{"ids"')][-1])["ids"]
    assert len(ids) == 2 and len(ids[0]) == len(ids[1]) == 256
    assert not set(ids[0]) & set(ids[1])
    assert sorted(ids[0] + ids[1]) == list(range(512))
