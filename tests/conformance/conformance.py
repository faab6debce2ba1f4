# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""The front-door conformance test (issue 29): one scenario run through every front door
that supports each part, every consumer's batches compared byte for byte with the native
leader's (a producer::Producer built directly: conformance_leader), and every front door's
refusal of an option compared with the front-door table (`batchcast info -c`).

The scenario: seed 11, 2 epochs of 60 real-photo JPEGs (random crop, flip) of which samples
3, 17, 18 and 41 are corrupt (on_bad_sample=skip), producer batches of 8, and six consumers:
  A  batch 8;  B  batch 5 (exact batches joined across producer batches);
  C  batch 8, a late joiner (it attaches while A holds after its first batch: the epoch's
     start is replayed to it alone, so it sees what A sees);
  S0, S1  a shard pair (mode=shard, world_size 2, batch 4);
  R  batch 8, resumed at epoch 1 batch 1.
Each consumer writes one line per batch: epoch, index, size, repeats, and every sample's id
with a checksum of its pixels and label (digest.h).

A front door runs the parts it supports (the matrix below, printed at the end). Adding a front
door to the table (`batchcast info --front-doors`) without a driver here, or an option to the
registry without a probe value in VALUES, fails the test.

Usage: conformance.py --build BUILD [--work DIR] [--only DOOR,...]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

N = 60
BAD = [3, 17, 18, 41]
SCENARIO = ["--seed", "11", "--epochs", "2", "--image-size", "16", "--crop", "random",
            "--flip", "--threads", "2", "--on-bad-sample", "skip", "--producer-batch", "8",
            "--batch-size", "8", "--late-join-window", "1", "--heartbeat-ms", "20s"]
CONSUMERS = {
    "A": ["--batch-size", "8"],
    "B": ["--batch-size", "5"],
    "C": ["--batch-size", "8"],
    "S0": ["--batch-size", "4", "--mode", "shard", "--rank", "0", "--world-size", "2"],
    "S1": ["--batch-size", "4", "--mode", "shard", "--rank", "1", "--world-size", "2"],
    "R": ["--batch-size", "8", "--start-epoch", "1", "--start-batch", "1"],
}
# A probe value for every option of the registry: a new option must be entered here (and in
# the front-door table) before the test passes.
VALUES = {
    "dataset": "x.h5", "seed": "3", "epochs": "2", "limit_samples": "10", "shuffle": "false",
    "threads": "1", "image_size": "16", "crop": "none", "crop_scale_min": "0.5",
    "crop_scale_max": "0.9", "flip": "true", "normalize": "true", "mean": "0.5,0.5,0.5",
    "std": "0.2,0.2,0.2", "dtype": "float32", "layout": "hwc", "channels": "3",
    "max_pixels": "64m", "dct_scaling": "false", "crop_decode": "false",
    "on_bad_sample": "skip", "verify": "off", "batch_size": "8", "buffer_depth": "3",
    "producer_batch": "128", "ring_slots": "6", "carve_offset": "true", "carve_shuffle": "true",
    "leader_trains": "true", "ranks_per_node": "2", "mode": "shard", "job_id": "conf",
    "heartbeat_ms": "5s", "allowed_leader_uid": "0", "gpu": "off", "trainers_per_gpu": "1",
    "gpu_finish": "true", "resize": "resize(min=8,max=16,step=8)", "stage": "model(path=x.pt)",
    "telemetry": "on", "experiment": "e", "workload": "w", "run_name": "r",
    "drop_last": "true", "connect_timeout": "5s", "rank": "1", "world_size": "2",
    "start_epoch": "1", "start_batch": "1", "start_run_epoch": "0", "pad_last": "true",
    "cache": "1m",
    "late_join_window": "0.5", "join_mid_epoch": "true", "late_join_catch_ups": "1",
    "view": "view(size=8)", "views_max": "2", "view_bytes": "1m",
}
# The parts each front door runs (address: the six consumers attach to the leader's address).
MATRIX = {
    "reference": "A B C S0 S1 R",
    "serve": "A B C S0 S1 R",
    "python-leader": "A B C S0 S1 R",
    "python-producer": "A B C S0 S1 R",
    "c-leader": "A B C S0 S1 R",
    "launcher": "A B S0 S1 R",
    "mpi": "A B R",
    "multinode": "S0 S1 A",
}
# The multi-node leader's shard parts are cut before they are decoded (each node decodes only
# its trainers' parts, docs/multinode.md), so a skipped sample shortens its own part where a
# consumer cutting its shard from a node's stream cuts over the samples delivered: its shard
# pair is compared on a dataset without bad samples (CLEAN), with the native leader's there.
CLEAN = {"multinode": {"S0", "S1"}}


class Failed(Exception):
    pass


class Run:
    def __init__(self, a):
        self.build = os.path.abspath(a.build)
        self.work = a.work
        self.bin = lambda *p: os.path.join(self.build, *p)
        self.dataset = os.path.join(self.work, "conformance.h5")
        self.clean = os.path.join(self.work, "clean.h5")
        self.env = dict(os.environ, PYTHONPATH=self.bin("python"),
                        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMPI_MCA_rmaps_base_oversubscribe="1")
        for k in list(self.env):
            if k.startswith("BATCHCAST_"):
                del self.env[k]
        self.table = {}  # option key -> the front doors that read it
        self.reference = {}
        self.results = {}  # door -> {part: "ok" | "FAIL ..."}
        self.refusals = {}
        self.n = 0

    # ------------------------------------------------------------------ plumbing
    def scenario(self, door):
        """The scenario's options a front door reads (the table): the others it refuses, and
        the part they configure (late join across nodes) is not the door's."""
        out, i = [], 0
        while i < len(SCENARIO):
            key = SCENARIO[i][2:].replace("-", "_")
            n = 2 if i + 1 < len(SCENARIO) and not SCENARIO[i + 1].startswith("--") else 1
            if door in self.table.get(key, [door]):
                out += SCENARIO[i:i + n]
            i += n
        return out

    def out(self, door, part):
        return os.path.join(self.work, f"{door}.{part}.txt")

    def fifo(self, name):
        path = os.path.join(self.work, f"{name}.{self.n}.fifo")
        self.n += 1
        os.mkfifo(path)
        return path

    def spawn(self, cmd, log, env=None):
        p = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                             env=env or self.env, cwd=self.work)
        p.log = log
        return p

    def wait(self, p, what, timeout=120):
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            raise Failed(f"{what} did not finish within {timeout} s")
        if rc != 0:
            raise Failed(f"{what} exited with {rc}: {self.tail(p)}")

    def signal(self, path, p, what, write=False, timeout=120):
        """Reads one byte from FIFO `path` that process p writes (or writes one that p reads).
        Opening a FIFO blocks until the other end opens it: if p exits first, or the deadline
        passes, a watchdog opens the other end itself, so that a consumer that failed before
        its signal fails this run with its log instead of hanging it."""
        done = threading.Event()

        def watchdog():
            deadline = time.monotonic() + timeout
            while not done.wait(0.1):  # a poll of p and the deadline, not synchronisation
                if p.poll() is not None or time.monotonic() > deadline:
                    try:
                        os.close(os.open(path, (os.O_RDONLY if write else os.O_WRONLY) |
                                         os.O_NONBLOCK))
                    except OSError:
                        pass
                    return

        t = threading.Thread(target=watchdog, daemon=True)
        t.start()
        try:
            if write:
                with open(path, "w") as f:
                    f.write("1")
                got = "1"
            else:
                with open(path) as f:
                    got = f.read(1)
        except BrokenPipeError:
            got = ""
        finally:
            done.set()
            t.join()
        if not got or (write and p.poll() is not None and p.returncode != 0):
            state = f"exited with {p.returncode}" if p.poll() is not None else \
                f"gave no sign within {timeout} s"
            raise Failed(f"{what} {state} before its signal on {os.path.basename(path)}: "
                         f"{self.tail(p)}")

    def tail(self, p):
        try:
            return open(p.log).read()[-1500:]
        except (AttributeError, OSError):
            return ""

    def ready(self, p, log, timeout=60):
        """The 'ready NAME' line of a leader's output."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in open(log).read().splitlines():
                if line.startswith("ready "):
                    return line.split()[1].lstrip("@")
                if line.startswith("batchcast serve: listening on @"):
                    return line.split("@")[1].split()[0]
            if p.poll() is not None:
                raise Failed(f"leader exited with {p.returncode}: {open(log).read()[-1500:]}")
            time.sleep(0.02)  # polling a log for a line, not synchronising with the stream
        raise Failed(f"leader did not listen within {timeout} s")

    def consumer(self, door, part, address, extra=()):
        cmd = [self.bin("tests", "conformance", "conformance_consumer"), "--out",
               self.out(door, part), "--address", address, *SCENARIO_CONSUMER,
               *CONSUMERS[part.split("-")[0]], *extra]
        return self.spawn(cmd, self.out(door, part) + ".log")

    # ------------------------------------------------------------------ the scenario
    def address_scenario(self, door, start_leader):
        """The six consumers against a leader started by start_leader(expect) -> (proc, name)."""
        leader, address = start_leader(5)
        first, go, attached = self.fifo("first"), self.fifo("go"), self.fifo("attached")
        a_attached = self.fifo("a-attached")
        procs = {"A": self.consumer(door, "A", address, ["--notify-attached", a_attached,
                                                           "--notify-first", first, "--wait", go])}
        # A joins first. A leader without expected consumers (batchcast serve) starts its
        # stream with its first member: were R (resuming at epoch 1) first, the stream would
        # start there and could end before A attached ("the stream has already ended").
        self.signal(a_attached, procs["A"], f"{door} consumer A")
        for part in ("B", "S0", "S1", "R"):
            procs[part] = self.consumer(door, part, address)
        # A has its first batch and holds: the stream is in epoch 0.
        self.signal(first, procs["A"], f"{door} consumer A")
        procs["C"] = self.consumer(door, "C", address, ["--notify-attached", attached])
        # C has joined: the leader admits it before going on.
        self.signal(attached, procs["C"], f"{door} consumer C")
        self.signal(go, procs["A"], f"{door} consumer A", write=True)
        for part, p in procs.items():
            self.wait(p, f"{door} consumer {part}")
        self.wait(leader, f"{door} leader")
        return list(procs)

    def leader_log(self, door):
        return os.path.join(self.work, f"{door}.leader.log")

    def start_reference(self, expect, dataset=None):
        log = self.leader_log("reference")
        p = self.spawn([self.bin("tests", "conformance", "conformance_leader"), "--socket",
                        f"bc-conf-{os.getpid()}-ref{self.n}", "--expect", str(expect),
                        "--dataset", dataset or self.dataset, *SCENARIO], log)
        self.n += 1
        return p, self.ready(p, log)

    def reference_clean(self):
        """The native leader's shard pair on the dataset without bad samples."""
        leader, address = self.start_reference(2, self.clean)
        procs = {p: self.consumer("reference", p + "-clean", address) for p in ("S0", "S1")}
        for part, p in procs.items():
            self.wait(p, f"reference consumer {part} (clean)")
        self.wait(leader, "reference leader (clean)")
        for part in procs:
            self.reference[part + "-clean"] = open(self.out("reference", part + "-clean")).read().splitlines()

    def start_serve(self, expect):
        log = self.leader_log("serve")
        p = self.spawn([self.bin("bin", "batchcast"), "serve", "--socket",
                        f"bc-conf-{os.getpid()}-serve", "--dataset", self.dataset,
                        *self.scenario("serve")], log)
        return p, self.ready(p, log)

    def start_python(self, mode):
        def start(expect):
            log = self.leader_log("python-" + mode)
            p = self.spawn([sys.executable, os.path.join(HERE, "conformance_py.py"), mode,
                            self.dataset, str(expect), json.dumps(SCENARIO)], log)
            return p, self.ready(p, log)
        return start

    def start_capi(self, expect):
        log = self.leader_log("c-leader")
        p = self.spawn([self.bin("tests", "conformance", "conformance_capi"),
                        f"bc-conf-{os.getpid()}-capi", str(expect),
                        " ".join(["--dataset", self.dataset, *self.scenario("c-leader")])], log)
        return p, self.ready(p, log)

    def launcher(self, parts, trainer_flags, extra=()):
        """batchcast-run, torchrun style: task 0 leads, tasks 1.. run conformance_consumer."""
        tasks = len(parts) + 1
        per_rank = ";".join(f"{r}:" + ",".join(CONSUMERS[p] + list(trainer_flags.get(p, [])))
                            for r, p in enumerate(parts))
        out = os.path.join(self.work, "launcher.rank%r.txt")
        procs = []
        for r in range(tasks):
            env = dict(self.env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(tasks),
                       LOCAL_WORLD_SIZE=str(tasks), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT="29400", TORCHELASTIC_RUN_ID=f"conf{os.getpid()}{self.n}")
            cmd = [self.bin("bin", "batchcast-run"), "--dataset", self.dataset,
                   *self.scenario("launcher"), *extra, "--", self.bin("tests", "conformance", "conformance_consumer"),
                   "--out", out, "--per-rank", per_rank]
            procs.append(self.spawn(cmd, os.path.join(self.work, f"launcher.task{r}.log"), env))
        self.n += 1
        for r, p in enumerate(procs):
            self.wait(p, f"batchcast-run task {r}")
        for r, part in enumerate(parts):
            shutil.move(os.path.join(self.work, f"launcher.rank{r}.txt"), self.out("launcher", part))

    def mpirun(self, door, ranks, parts_by_rank, extra=(), expect_fail=False, dataset=None):
        out = os.path.join(self.work, f"{door}.mpi%r.txt")
        # A trainer's own flags; mode, rank and world size are the Runtime's (from the
        # communicator and --mode).
        def own(part):
            flags, words = [], CONSUMERS[part.rstrip("3")]
            for i in range(0, len(words), 2):
                if words[i] not in ("--mode", "--rank", "--world-size"):
                    flags += words[i:i + 2]
            return flags
        per_rank = ";".join(f"{r}:" + ",".join(own(p)) for r, p in parts_by_rank.items())
        cmd = [shutil.which("mpirun") or "mpirun", "--oversubscribe", "--bind-to", "none",
               "-n", str(ranks), self.bin("tests", "conformance", "conformance_mpi"), "--out",
               out, "--per-rank", per_rank, "--dataset", dataset or self.dataset,
               *self.scenario(door),
               *extra]
        log = os.path.join(self.work, f"{door}.mpirun.{self.n}.log")
        self.n += 1
        p = self.spawn(cmd, log)
        if expect_fail:
            return p, log
        self.wait(p, f"mpirun ({door})", timeout=180)
        for r, part in parts_by_rank.items():
            shutil.move(out.replace("%r", str(r)), self.out(door, part))

    # ------------------------------------------------------------------ the front doors
    def run_door(self, door):
        if door == "reference":
            self.address_scenario(door, self.start_reference)
        elif door == "serve":
            self.address_scenario(door, self.start_serve)
        elif door == "python-leader":
            self.address_scenario(door, self.start_python("leader"))
        elif door == "python-producer":
            self.address_scenario(door, self.start_python("producer"))
        elif door == "c-leader":
            self.address_scenario(door, self.start_capi)
        elif door == "launcher":
            self.launcher(["A", "B"], {})
            self.launcher(["S0", "S1"], {}, ["--mode", "shard"])
            self.launcher(["R"], {})
        elif door == "mpi":  # R: a trainer resuming in a job whose leader streams from 0
            self.mpirun("mpi", 3, {1: "A", 2: "B"})
            self.mpirun("mpi", 2, {1: "R"})
        elif door == "multinode":
            self.mpirun("multinode", 3, {1: "S0", 2: "S1"}, ["--mode", "shard"],
                        dataset=self.clean)
            self.mpirun("multinode", 4, {1: "A", 3: "A3"}, ["--ranks-per-node", "2"])
        else:
            raise Failed(f"front door '{door}' has no conformance driver")

    def compare(self, door):
        for part in MATRIX[door].split():
            ref_part = "A" if part == "C" else part
            if part in CLEAN.get(door, ()):
                ref_part += "-clean"
            got_path = self.out(door, part)
            want = self.reference[ref_part]
            got = open(got_path).read().splitlines() if os.path.exists(got_path) else None
            if door == "multinode" and part == "A":  # both virtual nodes' trainers
                other = open(self.out(door, "A3")).read().splitlines()
                if other != got:
                    self.results[door][part] = "FAIL: the two nodes' trainers differ"
                    continue
            if got == want:
                self.results[door][part] = f"ok ({len(got)} batches)"
                continue
            if got is None:
                self.results[door][part] = "FAIL: no output"
                continue
            for i, (g, w) in enumerate(zip(got, want)):
                if g != w:
                    self.results[door][part] = (f"FAIL: batch line {i}: got '{g[:120]}', "
                                                f"the native leader's '{w[:120]}'")
                    break
            else:
                self.results[door][part] = (f"FAIL: {len(got)} batches, the native leader's "
                                            f"{len(want)}")

    # ------------------------------------------------------------------ refusals
    def refusal(self, door, table, doors):
        """The first option the table says `door` does not read, set through the door: it must
        fail naming the option and the door."""
        name = doors[door]["name"]
        key = next(r["key"] for r in table if door not in r["doors"])
        flag = ["--" + key.replace("_", "-"), VALUES[key]]
        if door == "serve":
            p = subprocess.run([self.bin("bin", "batchcast"), "serve", "--socket",
                                f"bc-conf-{os.getpid()}-refuse", "--dataset", self.dataset,
                                *flag], capture_output=True, text=True, env=self.env,
                               timeout=60)
            rc, msg = p.returncode, p.stderr
        elif door == "c-leader":
            p = subprocess.run([self.bin("tests", "conformance", "conformance_capi"),
                                f"bc-conf-{os.getpid()}-refuse", "1",
                                " ".join(["--dataset", self.dataset, *flag])],
                               capture_output=True, text=True, env=self.env, timeout=60)
            rc, msg = p.returncode, p.stderr
        elif door == "launcher":
            env = dict(self.env, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT="29400")
            p = subprocess.run([self.bin("bin", "batchcast-run"), "--dataset", self.dataset,
                                *flag, "--", "true"], capture_output=True, text=True, env=env,
                               timeout=60)
            rc, msg = p.returncode, p.stdout + p.stderr
        elif door in ("mpi", "multinode"):
            extra = flag + (["--mode", "shard"] if door == "multinode" else [])
            proc, log = self.mpirun(door, 3, {1: "S0", 2: "S1"}, extra, expect_fail=True)
            rc = proc.wait(timeout=120)
            msg = open(log).read()
        elif door in ("python-leader", "python-producer", "consumer"):
            p = subprocess.run([sys.executable, os.path.join(HERE, "conformance_py.py"),
                                "refuse-" + door.split("-")[-1], self.dataset,
                                json.dumps([r["key"] for r in table if door not in r["doors"]]),
                                json.dumps(VALUES)], capture_output=True, text=True,
                               env=self.env, timeout=120)
            rc, msg = p.returncode, p.stdout + p.stderr
            if rc == 0:
                self.refusals[door] = f"ok: {msg.strip()}"
                return
            raise Failed(f"{door} refusals: {msg[-1500:]}")
        else:
            raise Failed(f"front door '{door}' has no refusal probe")
        if rc == 0 or f"option '{key}'" not in msg or name not in msg:
            raise Failed(f"{door}: option '{key}' set through it should be refused naming the "
                         f"option and '{name}' (rc {rc}): {msg[-1500:]}")
        self.refusals[door] = f"ok: '{key}' refused (exit {rc})"


HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO_CONSUMER = ["--seed", "11", "--epochs", "2", "--heartbeat-ms", "20s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--work")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    keep = a.work is not None
    a.work = a.work or tempfile.mkdtemp(prefix="bc-conformance-")
    os.makedirs(a.work, exist_ok=True)
    r = Run(a)
    t0 = time.monotonic()
    info = lambda *args: json.loads(subprocess.run([r.bin("bin", "batchcast"), "info", *args],
                                                   check=True, capture_output=True, text=True,
                                                   env=r.env).stdout)
    table, doors = info("-c"), {d["key"]: d for d in info("--front-doors")}
    r.table = {row["key"]: row["doors"] for row in table}
    errors = []
    missing = [row["key"] for row in table if row["key"] not in VALUES]
    if missing:
        errors.append(f"options not entered in the conformance test (VALUES): {missing}")
    undriven = [d for d in doors if d not in MATRIX and d != "consumer"]
    if undriven:
        errors.append(f"front doors without a conformance driver (MATRIX): {undriven}")
    # The clean set has one sample more: its shard tail (61 mod 8 = 5 samples over 2 trainers)
    # wraps, so the one planner's repeats are compared too.
    for path, n, bad in ((r.dataset, N, ",".join(map(str, BAD))), (r.clean, N + 1, "")):
        subprocess.run([r.bin("tests", "conformance", "conformance_dataset"), path, str(n), bad],
                       check=True, env=r.env)
    only = [d for d in a.only.split(",") if d]
    for door in MATRIX:
        if only and door != "reference" and door not in only:
            continue
        r.results[door] = {}
        try:
            r.run_door(door)
            if door == "reference":
                for part in MATRIX[door].split():
                    r.reference[part] = open(r.out(door, part)).read().splitlines()
                if r.reference["C"] != r.reference["A"]:
                    raise Failed("the native leader's late joiner C differs from A")
                r.reference_clean()
                r.results[door] = {p: f"reference ({len(r.reference[p])} batches)"
                                   for p in MATRIX[door].split()}
            else:
                r.compare(door)
        except (Failed, subprocess.TimeoutExpired, OSError) as e:
            r.results[door]["run"] = f"FAIL: {e}"
    for door in doors:
        if only and door not in only:
            continue
        try:
            r.refusal(door, table, doors)
        except (Failed, subprocess.TimeoutExpired, OSError) as e:
            r.refusals[door] = f"FAIL: {e}"
    print(f"front-door conformance ({time.monotonic() - t0:.1f} s, work dir {a.work}):")
    for door, parts in r.results.items():
        for part, verdict in parts.items():
            print(f"  {door:16} {part:4} {verdict}")
            if verdict.startswith("FAIL"):
                errors.append(f"{door} {part}: {verdict}")
    print("refusals (the first option each front door does not read, set through it):")
    for door, verdict in r.refusals.items():
        print(f"  {door:16} {verdict}")
        if verdict.startswith("FAIL"):
            errors.append(f"{door} refusal: {verdict}")
    if errors:
        print("FAIL:\n  " + "\n  ".join(errors))
        return 1
    if not keep:
        shutil.rmtree(a.work, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
