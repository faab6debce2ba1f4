#!/usr/bin/python3
# Kills a train-many trainer at a random mid-epoch checkpoint (tests/multimodel/train_many_test.sh
# case mpi): waits for the K-th "checkpoint" event in OUTDIR/events.jsonl, stops the trainer
# (SIGSTOP: it cannot move on while its checkpoints are read), and if some model's state.json
# holds a mid-epoch checkpoint, SIGKILLs it and writes what each model will resume from to
# OUTDIR/../killed.json; otherwise (every model just ended an epoch) it lets the trainer go
# on (SIGCONT) to the next checkpoint event. Exit 1 if the run ends first.
#   kill_mid_epoch.py OUTDIR K MODEL...
import json, os, signal, sys, time

out, k, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
events = os.path.join(out, "events.jsonl")


def checkpoints():
    if not os.path.exists(events):
        return []
    with open(events) as f:
        return [e for e in (json.loads(l) for l in f if l.endswith("\n"))
                if e["event"] == "checkpoint"]


deadline = time.monotonic() + 120  # turns a hang into a failure; not a synchronisation
while time.monotonic() < deadline:
    cps = checkpoints()
    if len(cps) < k:
        time.sleep(0.01)  # polling the file for the condition, not a wait for an event
        continue
    pid = cps[-1]["pid"]
    os.kill(pid, signal.SIGSTOP)
    states = {}
    for m in models:
        path = os.path.join(out, m, "state.json")
        states[m] = json.load(open(path)) if os.path.exists(path) else None
    partial = {m: s for m, s in states.items() if s and "partial" in s}
    if not partial:
        os.kill(pid, signal.SIGCONT)
        k = len(cps) + 1
        continue
    os.kill(pid, signal.SIGKILL)
    killed = {m: {"steps": (s["partial"]["steps"] if "partial" in s else s["steps"]) if s else 0,
                  "epochs_done": s["epochs_done"] if s else 0,
                  "finished": bool(s and s["finished"]),
                  "position": s["position"] if s else [0, 0],
                  "mid_epoch": bool(s and "partial" in s)} for m, s in states.items()}
    json.dump(killed, open(os.path.join(out, "..", "killed.json"), "w"))
    print("killed pid %d after checkpoint event %d: %s" % (pid, len(cps), json.dumps(killed)))
    sys.exit(0)
print("kill_mid_epoch: no mid-epoch checkpoint was seen in %s" % out, file=sys.stderr)
sys.exit(1)
