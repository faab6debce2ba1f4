#!/usr/bin/python3
# Checks of one train-many run (tests/multimodel/train_many_test.sh), from its output_dir:
#   check_run.py order OUTDIR CONFIG PARAMS_JSON   the epochs ran in the policy's order
#   check_run.py once OUTDIR N                     every model epoch saw samples 0..N-1 once
#   check_run.py record OUTDIR N EPOCHS_JSON       results.json (the checkpointed record, over
#                                                  restarts) has every model epoch once, each
#                                                  with samples 0..N-1 once
#   check_run.py field OUTDIR MODEL KEY            a key of a model in results.json
# The expected order comes from a reference of the documented policies (docs/multi-model.md),
# written apart from the C++ planner.
import json, sys

M64 = (1 << 64) - 1


def mix(x):  # splitmix64, as the trainer's id checksum
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def events(out):
    return [json.loads(line) for line in open(out + "/events.jsonl")]


def reference(cfg, params):
    """The sequence of model epochs a sequential policy runs."""
    models = cfg["models"]
    names = [m["name"] for m in models]
    epochs = {m["name"]: m.get("epochs", 1) for m in models}
    policy = cfg.get("policy", "concurrent")

    def rr(group):
        left, seq = dict((n, epochs[n]) for n in group), []
        while any(left.values()):
            for n in group:
                if left[n]:
                    left[n] -= 1
                    seq.append(n)
        return seq

    if policy == "fcfs":
        return [n for n in names for _ in range(epochs[n])]
    if policy == "round-robin":
        return rr(names)
    if policy == "sjf":
        key = params if cfg.get("sjf_by", "params") == "params" else epochs
        return [n for n in sorted(names, key=lambda n: key[n]) for _ in range(epochs[n])]
    if policy == "priority":
        prio = {m["name"]: m.get("priority", 0) for m in models}
        seq = []
        for p in sorted(set(prio.values()), reverse=True):
            seq += rr([n for n in names if prio[n] == p])
        return seq
    raise SystemExit("no reference order for policy " + policy)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


mode, out = sys.argv[1], sys.argv[2]
if mode == "order":
    cfg = json.load(open(sys.argv[3]))
    params = json.load(open(sys.argv[4]))
    want = reference(cfg, params)
    got = [e["model"] for e in events(out) if e["event"] == "epoch"]
    if got != want:
        fail("policy %s ran epochs %s, expected %s" % (cfg["policy"], got, want))
    done = [e["model"] for e in events(out) if e["event"] == "finished"]
    last = {}
    for i, n in enumerate(want):
        last[n] = i
    want_done = sorted(last, key=lambda n: last[n])
    res = json.load(open(out + "/results.json"))
    if done != want_done or res["completion_order"] != want_done:
        fail("completion order %s / %s, expected %s" % (done, res["completion_order"], want_done))
    print("order ok: %s; completion %s" % (" ".join(got), " ".join(done)))
elif mode == "once":
    n = int(sys.argv[3])
    want_hash = sum(mix(i) for i in range(n)) & M64
    count = 0
    for e in events(out):
        if e["event"] != "epoch":
            continue
        count += 1
        if e["samples"] != n or e["distinct"] != n or int(e["id_hash"]) != want_hash:
            fail("model %s epoch %d saw %d samples, %d distinct, id hash %s; expected %d, %d, %d"
                 % (e["model"], e["epoch"], e["samples"], e["distinct"], e["id_hash"], n, n,
                    want_hash))
    if count == 0:
        fail("no epoch was recorded in " + out)
    print("exactly once ok: %d model epochs of %d samples" % (count, n))
elif mode == "record":
    n, want = int(sys.argv[3]), json.loads(sys.argv[4])
    want_hash = sum(mix(i) for i in range(n)) & M64
    res = json.load(open(out + "/results.json"))
    got = {m["name"]: [e["epoch"] for e in m["epochs"]] for m in res["models"]}
    if got != {k: list(range(v)) for k, v in want.items()}:
        fail("model epochs over the runs: %s; expected epochs %s once each" % (got, want))
    for m in res["models"]:
        for e in m["epochs"]:
            if e["samples"] != n or e["distinct"] != n or int(e["id_hash"]) != want_hash:
                fail("model %s epoch %d saw %d samples, %d distinct" % (m["name"], e["epoch"],
                                                                       e["samples"], e["distinct"]))
        if not m["finished"] or m["epochs_done"] != want[m["name"]]:
            fail("model %s: finished %s after %d epochs" % (m["name"], m["finished"], m["epochs_done"]))
    print("record ok: %s" % got)
elif mode == "field":
    res = json.load(open(out + "/results.json"))
    print([m for m in res["models"] if m["name"] == sys.argv[3]][0][sys.argv[4]])
else:
    fail("unknown mode " + mode)
