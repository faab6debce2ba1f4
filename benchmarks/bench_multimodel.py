#!/usr/bin/python3
# make bench B=multimodel (benchmarks/run.sh): several models in one process vs one process
# per model, on the same node stream (`batchcast serve`), Fashion-MNIST (Debian's
# dataset-fashion-mnist).
#
#   unified   one `batchcast train-many` with the three models (policy concurrent)
#   separate  three `batchcast train-many` processes with one model each, started together
# side by side: wall, CPU-seconds of the trainer processes (and of the service), peak RSS
# (one process vs the sum of three), per-model test accuracy. Then every sequential policy
# once: the order of completion and each model's training time. A table and one JSON line.
# Models: tests/multimodel/make_fixture.py (an MLP, a LeNet-style CNN, a small ResNet).
# The data is real Fashion-MNIST (60000 train, 10000 test), converted to raw HDF5 once.
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, time

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.dirname(here)

ap = argparse.ArgumentParser()
ap.add_argument("--build", required=True)
ap.add_argument("--samples", type=int, default=10000, help="training samples per epoch")
ap.add_argument("--test", type=int, default=2000, help="test samples evaluated per model")
ap.add_argument("--epochs", type=int, default=1, help="epochs per model (unified vs separate)")
ap.add_argument("--reps", type=int, default=3, help="repetitions of unified vs separate")
ap.add_argument("--policy-samples", type=int, default=2000, help="samples per epoch, policy runs")
ap.add_argument("--data", help="directory with fashion-mnist-{train,test}.h5 (raw); made if missing")
args = ap.parse_args()

build = os.path.abspath(args.build)
cli = os.path.join(build, "bin", "batchcast")
cache = os.path.join(build, "benchmarks")
data = os.path.abspath(args.data) if args.data else os.path.join(cache, "multimodel_data")
models = os.path.join(cache, "multimodel_models")
os.makedirs(cache, exist_ok=True)
fm = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
os.makedirs(data, exist_ok=True)
for split, name in (("train", "fashion-mnist-train.h5"), ("t10k", "fashion-mnist-test.h5")):
    if not os.path.exists(os.path.join(data, name)):  # raw only (the demo's PNG set is not needed)
        subprocess.run([cli, "convert", "idx", "--images", "%s/%s-images-idx3-ubyte.gz" % (fm, split),
                        "--labels", "%s/%s-labels-idx1-ubyte.gz" % (fm, split),
                        "--out", os.path.join(data, name), "--encode", "raw",
                        "--fashion-mnist-classes"], check=True, stdout=subprocess.DEVNULL)
if not os.path.exists(os.path.join(models, "params.json")):
    subprocess.run([sys.executable, os.path.join(src, "tests", "multimodel", "make_fixture.py"),
                    models, "1"], check=True)
params = json.load(open(os.path.join(models, "params.json")))
SPECS = [  # the test's settings (tests/multimodel/train_many_test.sh)
    {"name": "mlp", "model": models + "/mlp.pt", "lr": 0.05, "batch_size": 64,
     "optimizer": "sgd", "momentum": 0.9, "priority": 1},
    {"name": "lenet", "model": models + "/lenet.pt", "lr": 0.002, "batch_size": 32,
     "optimizer": "adam", "priority": 2},
    {"name": "resnet", "model": models + "/resnet.pt", "lr": 0.003, "batch_size": 100,
     "optimizer": "adamw", "weight_decay": 0.01, "scheduler": "cosine", "priority": 2},
]
work = tempfile.mkdtemp(prefix="bc-bench-multimodel.")


def proc_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Service:
    def __init__(self, samples):
        self.sock = "bc-bench-mm-%d-%d" % (os.getpid(), samples)
        self.log = open(os.path.join(work, self.sock + ".log"), "w+")
        self.p = subprocess.Popen([cli, "serve", "--dataset=" + data + "/fashion-mnist-train.h5",
                                   "--socket=" + self.sock, "--max-batch=128", "--threads=2",
                                   "--limit-samples=%d" % samples, "--seed=1"],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while "listening on" not in open(self.log.name).read():
            if self.p.poll() is not None or time.time() > deadline:
                sys.exit("bench_multimodel: the service did not start: " + open(self.log.name).read())
            time.sleep(0.05)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait()


def config(name, specs, policy, epochs, extra=None):
    out = os.path.join(work, name)
    cfg = {"policy": policy, "output_dir": out, "mean": 0.286, "std": 0.353,
           "test_dataset": data + "/fashion-mnist-test.h5", "test_limit": args.test,
           "models": [dict(s, epochs=epochs[s["name"]]) for s in specs]}
    cfg.update(extra or {})
    path = os.path.join(work, name + ".json")
    json.dump(cfg, open(path, "w"))
    return path, out


def run_all(svc, configs):
    """Starts one train-many per config at once; wall, CPU-s and max RSS of each, results."""
    t0 = time.time()
    svc_cpu0 = proc_cpu_s(svc.p.pid)
    procs = [subprocess.Popen([cli, "train-many", c, "--address=@" + svc.sock],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c, _ in configs]
    usage = {}
    while len(usage) < len(procs):
        pid, status, ru = os.wait4(-1, 0)
        usage[pid] = (status, ru)
    wall = time.time() - t0
    cpu = rss = 0.0
    for p in procs:
        status, ru = usage[p.pid]
        if status != 0:
            sys.exit("bench_multimodel: train-many failed: " + p.stderr.read().decode())
        cpu += ru.ru_utime + ru.ru_stime
        rss += ru.ru_maxrss / 1024.0
    results = [json.load(open(out + "/results.json")) for _, out in configs]
    return {"wall_s": wall, "cpu_s": cpu, "service_cpu_s": proc_cpu_s(svc.p.pid) - svc_cpu0,
            "peak_rss_mib": rss, "processes": len(procs),
            "accuracy": {m["name"]: m["test_accuracy"] for r in results for m in r["models"]},
            "train_s": {m["name"]: m["train_s"] for r in results for m in r["models"]}}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


svc = Service(args.samples)
epochs = {s["name"]: args.epochs for s in SPECS}
rows = {"unified": [], "separate": []}
for rep in range(args.reps):
    rows["unified"].append(run_all(svc, [config("unified-%d" % rep, SPECS, "concurrent", epochs)]))
    rows["separate"].append(run_all(svc, [config("separate-%d-%s" % (rep, s["name"]), [s],
                                                 "concurrent", epochs) for s in SPECS]))
svc.stop()

print("\n== multimodel: %d Fashion-MNIST samples x %d epoch(s), 3 models (params %s), %d reps"
      % (args.samples, args.epochs, params, args.reps))
print("%-9s %8s %8s %10s %13s  %s" % ("mode", "wall_s", "cpu_s", "svc_cpu_s", "peak_rss_mib",
                                       "test accuracy mlp/lenet/resnet (rep 0)"))
summary = {}
for mode, rs in rows.items():
    acc = rs[0]["accuracy"]
    print("%-9s %8.2f %8.2f %10.2f %13.0f  %s" % (
        mode, median([r["wall_s"] for r in rs]), median([r["cpu_s"] for r in rs]),
        median([r["service_cpu_s"] for r in rs]), median([r["peak_rss_mib"] for r in rs]),
        " / ".join("%.3f" % acc[n] for n in ("mlp", "lenet", "resnet"))))
    summary[mode] = {k: [r[k] for r in rs] for k in ("wall_s", "cpu_s", "service_cpu_s", "peak_rss_mib")}
    summary[mode]["accuracy"] = [r["accuracy"] for r in rs]
ratio = {k: [u[k] / s[k] for u, s in zip(rows["unified"], rows["separate"])]
         for k in ("wall_s", "cpu_s", "peak_rss_mib")}
for k, v in ratio.items():
    print("unified/separate %-13s min %.3f median %.3f max %.3f" % (k, min(v), median(v), max(v)))

svc = Service(args.policy_samples)
policy_epochs = {"mlp": 1, "lenet": 3, "resnet": 2}
policies = {}
print("\n== policies: %d samples per epoch, epochs %s" % (args.policy_samples, policy_epochs))
for name, policy, extra in [("concurrent", "concurrent", None), ("fcfs", "fcfs", None),
                            ("priority", "priority", None), ("sjf-params", "sjf", None),
                            ("sjf-epochs", "sjf", {"sjf_by": "epochs"}),
                            ("round-robin", "round-robin", None)]:
    r = run_all(svc, [config("policy-" + name, SPECS, policy, policy_epochs, extra)])
    res = json.load(open(os.path.join(work, "policy-" + name, "results.json")))
    policies[name] = {"completion_order": res["completion_order"], "wall_s": r["wall_s"],
                      "train_s": r["train_s"]}
    print("%-12s wall %6.2f s  completion %-22s train_s %s" % (
        name, r["wall_s"], " ".join(res["completion_order"]),
        " ".join("%s=%.2f" % (n, t) for n, t in r["train_s"].items())))
svc.stop()

shutil.rmtree(work)
print(json.dumps({"benchmark": "multimodel", "samples": args.samples, "epochs": args.epochs,
                  "reps": args.reps, "params": params, "unified_over_separate": ratio,
                  "modes": summary, "policies": policies}))
