# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""The leader's model stage (docs/model-stage.md) from every front door that publishes
batches: the Python Leader, the C API leader, the MPI Runtime, the multi-node leaders and
`batchcast serve` each run a module scripted here (each image's per-channel mean, tensor
"mean") once per producer batch, and each consumer finds in the slot what the module gives on
its own images. (The Python Producer publishes the caller's batches and refuses option
'stage' like every leader option: test_producer.py.)"""
import os
import shutil
import subprocess
import threading

import numpy as np
import pytest
import torch

import batchcast
from conftest import read_h5


class ChannelMean(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=[2, 3])


@pytest.fixture(scope="module")
def mean_pt(tmp_path_factory):
    path = tmp_path_factory.mktemp("stage") / "mean.pt"
    torch.jit.script(ChannelMean()).save(str(path))
    return str(path)


def stage(path, keep_input=True):
    return f"model(path={path},output=mean,keep_input={'true' if keep_input else 'false'})"


def test_python_leader_runs_the_stage_for_every_consumer(fmnist, mean_pt):
    n = 96
    leader = batchcast.Leader(fmnist["test"], consumers=2, max_batch_size=8, epochs=1,
                              batch_size=8, limit_samples=n, stage=stage(mean_pt))
    seen, bad = [0, 0], [0, 0]

    def consume(i, batch_size):
        loader = batchcast.Consumer(leader.address, batch_size=batch_size, with_info=True)
        for batch, info in loader:
            want = batch["images"].float().mean(dim=[2, 3])
            bad[i] += not torch.allclose(batch["mean"], want, rtol=1e-5, atol=1e-4)
            seen[i] += len(info.sample_ids) - info.repeats
    threads = [threading.Thread(target=consume, args=(i, b)) for i, b in enumerate((8, 5))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    leader.wait()
    assert seen == [n, n] and bad == [0, 0]


def test_python_leader_keep_input_false_publishes_no_images(fmnist, mean_pt):
    n = 64
    images, _ = read_h5(fmnist["test"])
    leader = batchcast.Leader(fmnist["test"], consumers=1, epochs=1, batch_size=8,
                              limit_samples=n, stage=stage(mean_pt, keep_input=False))
    loader = batchcast.Consumer(leader.address, batch_size=8, with_info=True)
    seen = 0
    for batch, info in loader:
        assert sorted(batch) == ["labels", "mean"]
        with pytest.raises(KeyError, match="keep_input=false in option 'stage'"):
            batch["images"]
        ids = np.asarray(info.sample_ids)
        want = torch.from_numpy(images[ids].reshape(len(ids), 1, -1).astype(np.float32)).mean(2)
        assert torch.allclose(batch["mean"], want, rtol=1e-5, atol=1e-4)
        seen += len(ids) - info.repeats
    leader.wait()
    assert seen == n


def torch_at_least(major, minor):
    v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return v >= (major, minor)


def test_python_leader_runs_an_exported_program(fmnist, tmp_path):
    """torch.export + AOTInductor (a .pt2 package) where the generation offers it (the stage
    module is built against the same generation's LibTorch: 2.6 or newer runs it); 1.13
    refuses the file with a message saying what to save instead."""
    pt2 = tmp_path / "mean.pt2"
    if torch_at_least(2, 6):
        import torch._inductor
        batch = torch.export.Dim("batch", min=1, max=4096)
        program = torch.export.export(ChannelMean(), (torch.zeros(2, 1, 28, 28),),
                                      dynamic_shapes={"x": {0: batch}})
        torch._inductor.aoti_compile_and_package(program, package_path=str(pt2))
    else:
        pt2.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: what the name says is enough
        with pytest.raises(batchcast.InvalidArgumentError,
                           match="needs LibTorch 2.6 or newer; this leader's LibTorch is 1.13"):
            batchcast.Leader(fmnist["test"], consumers=1, epochs=1, batch_size=8,
                             limit_samples=64, stage=stage(str(pt2)))
        return
    n = 64
    leader = batchcast.Leader(fmnist["test"], consumers=1, max_batch_size=8, epochs=1,
                              batch_size=8, limit_samples=n, stage=stage(str(pt2)))
    loader = batchcast.Consumer(leader.address, batch_size=5, with_info=True)
    seen = bad = 0
    for batch, info in loader:
        want = batch["images"].float().mean(dim=[2, 3])
        bad += not torch.allclose(batch["mean"], want, rtol=1e-5, atol=1e-4)
        seen += len(info.sample_ids) - info.repeats
    leader.wait()
    assert seen == n and bad == 0


def test_c_api_leader_runs_the_stage(fmnist, mean_pt):
    prog = os.environ.get("BCTEST_CAPI")
    if not prog:
        pytest.skip("BCTEST_CAPI (the capi_test program) is not set")
    # keep_input=true: "mean" against the pixels; keep_input=false: no images, same means.
    out = subprocess.run([prog, "--stage", fmnist["test"], "64", mean_pt], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stage OK 64 samples" in out.stdout


def run_mpi(program_env, ranks, fmnist, *args):
    """mpirun -n RANKS of the test program named by $PROGRAM_ENV on 96 Fashion-MNIST samples
    with ARGS; its stdout (it must exit 0)."""
    prog = os.environ.get(program_env)
    mpiexec = os.environ.get("BCTEST_MPIEXEC") or shutil.which("mpirun")
    if not prog or not mpiexec:
        pytest.skip(f"{program_env} or mpirun is not available")
    cmd = [mpiexec, "--oversubscribe", "--bind-to", "none", "-n", str(ranks), prog,
           f"--dataset={fmnist['test']}", "--limit_samples=96", "--epochs=1", "--threads=1",
           "--heartbeat_ms=30s", *args]
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_mpi_runtime_runs_the_stage(fmnist, mean_pt):
    # Rank 0 leads (and runs the stage); ranks 1 and 2 check "mean" against their images,
    # which they also check against their own decode.
    out = run_mpi("BCTEST_MPI_DATAPLANE", 3, fmnist, f"--stage={stage(mean_pt)}",
                  "--stage-mean=mean", "--bs=8,5", "--name=stage")
    assert "PASS mpi_dataplane stage" in out, out


@pytest.mark.parametrize("mode", ["replicate", "shard"])
def test_multinode_leaders_run_the_stage(fmnist, mean_pt, mode):
    # Two virtual nodes (ranks_per_node=3): each node's leader runs the stage on its slots;
    # every trainer checks "mean" against its images (and those against its own decode).
    batches = ["--producer_batch=24"] if mode == "replicate" else []
    out = run_mpi("BCTEST_MPI_MULTINODE", 5, fmnist, f"--stage={stage(mean_pt)}",
                  "--batch_size=8", f"--mode={mode}", "--ranks_per_node=3", *batches)
    assert "PASS mpi_multinode" in out, out


def test_service_runs_the_stage(fmnist, mean_pt):
    cli = os.environ.get("BCTEST_BIN")
    if not cli:
        pytest.skip("BCTEST_BIN (the batchcast CLI) is not set")
    sock = f"batchcast-test-{os.getpid()}-stage-serve"
    serve = subprocess.Popen([cli, "serve", "--dataset", fmnist["test"], "--batch-size", "8",
                              "--limit-samples", "48", "--socket", sock,
                              "--stage", stage(mean_pt)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in serve.stdout:
            lines.append(line)
            if "batchcast serve: listening" in line:
                break
        else:
            pytest.fail("batchcast serve exited: " + "".join(lines))
        loader = batchcast.Consumer(sock, batch_size=8, epochs=1, with_info=True)
        seen = 0
        for batch, info in loader:
            want = batch["images"].float().mean(dim=[2, 3])
            assert torch.allclose(batch["mean"], want, rtol=1e-5, atol=1e-4)
            seen += len(info.sample_ids) - info.repeats
        assert seen == 48
    finally:
        serve.terminate()
        serve.wait(timeout=60)

