// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The model-based randomized protocol test (issue 14, "The test that proves it"): for
// each seed, a random schedule of real processes — a leader running one of the producers
// (producers.h) and 1-4 consumers (protocol_consumer) with random batch sizes, depths,
// epochs, holds and release orders, early detaches (with live batches), kept last
// batches, late joiners, a consumer or the leader SIGSTOPped past the heartbeat then
// SIGCONTed, a SIGKILLed consumer, a consumer writing into a batch, an impostor listening
// first, consumers of several view groups (each checking its group's bytes; some on a schedule
// of sizes by epoch, checked at each epoch's size) — run by the engine (harness.h) and
// checked against the reference model (model.cc). A failing seed prints the command that
// replays it.
//   protocol_random --producer leader|service|external|multinode|all [--seeds K]
//                   [--first S] [--seed S] [--keep-going] [--deadline-ms MS] [--tame] [-v]
// --tame: only what the code before the fix supports (validates the harness itself).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/protocol/harness.h"

using namespace batchcast::protocol_test;

namespace {

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
  bool Coin(double p) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }
};

// Batches a consumer of batch b gets per epoch (ceil(n/b) carves per producer batch).
int64_t BatchesPerEpoch(int64_t n, int64_t p, int64_t b) {
  return (n / p) * ((p + b - 1) / b) + ((n % p) + b - 1) / b;
}

enum class Chaos { kNone, kConsumerStop, kLeaderStop, kKill, kImpostor, kWrite };
const char* ChaosName(Chaos c) {
  switch (c) {
    case Chaos::kNone: return "none";
    case Chaos::kConsumerStop: return "consumer-sigstop";
    case Chaos::kLeaderStop: return "leader-sigstop";
    case Chaos::kKill: return "consumer-sigkill";
    case Chaos::kImpostor: return "impostor";
    case Chaos::kWrite: return "consumer-writes";
  }
  return "?";
}

// A prefix of `nexts` Next() calls, holding up to plan.hold batches and releasing in
// random order; `event` (a sync op) goes right after Next number `event_at` (0: first).
std::string Prefix(Rng& rng, const ConsumerPlan& c, int nexts, int event_at, const std::string& event,
                   int* held_out) {
  std::string s;
  int held = 0;
  auto add = [&](const std::string& op) { s += (s.empty() ? "" : ",") + op; };
  if (event_at == 0 && !event.empty()) add(event);
  for (int k = 1; k <= nexts; ++k) {
    while (held > 0 && (held >= c.hold || rng.Coin(0.4))) {
      add("r");
      --held;
    }
    add("n");
    ++held;
    if (k == event_at && !event.empty()) add(event);
  }
  *held_out = held;
  return s;
}

// tame: only what the code before issue 14's fix supports (hold one batch at a time, no
// chaos, no late joiners, no kept or detached live batches) - validates the harness itself.
Scenario Generate(ProducerKind kind, uint64_t seed, bool tame, Chaos* chaos_out) {
  Rng rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(kind) + 1);
  Scenario s;
  ProducerSpec& p = s.producer;
  p.kind = kind;
  p.samples = rng.Int(24, 120);
  p.max_batch = static_cast<uint32_t>(rng.Int(2, 12));
  p.producer_batch = rng.Int(int(p.max_batch), 3 * int(p.max_batch));
  p.heartbeat_ms = 1000;
  p.seed = seed;
  const int initial = rng.Int(1, 4);
  int max_depth = 1;
  for (int i = 0; i < initial; ++i) {
    ConsumerPlan c;
    c.b = rng.Int(1, int(p.max_batch));
    c.depth = rng.Int(1, 3);
    c.epochs = rng.Int(1, 3);
    c.hold = tame ? 1 : rng.Int(1, c.depth);
    c.offset = rng.Coin(0.3);
    c.shuffle = rng.Coin(0.3);
    c.seed = seed * 131 + uint64_t(i);
    max_depth = std::max(max_depth, c.depth);
    s.consumers.push_back(c);
  }
  // Chaos: at most one of these per schedule.
  const int roll = rng.Int(0, 99);
  Chaos chaos = roll < 50 ? Chaos::kNone : roll < 62 ? Chaos::kConsumerStop
              : roll < 70 ? Chaos::kLeaderStop : roll < 82 ? Chaos::kKill
              : roll < 90 ? Chaos::kImpostor : roll < 95 ? Chaos::kWrite : Chaos::kNone;
  if (tame) chaos = Chaos::kNone;
  const int victim = rng.Int(0, initial - 1);
  if (chaos == Chaos::kConsumerStop || chaos == Chaos::kWrite)
    s.consumers[size_t(victim)].epochs = std::max(2, s.consumers[size_t(victim)].epochs);
  // Late joiners (not with a stopped leader: nobody could attach to it).
  int trigger = -1;
  if (chaos != Chaos::kLeaderStop && rng.Coin(0.3) && !tame) {
    trigger = rng.Int(0, initial - 1);
    if (trigger == victim && chaos != Chaos::kNone && initial > 1) trigger = (victim + 1) % initial;
    if (trigger == victim && chaos != Chaos::kNone) trigger = -1;
  }
  int epochs = 1;
  for (const auto& c : s.consumers) epochs = std::max(epochs, c.epochs);
  const int late = trigger >= 0 ? rng.Int(1, 2) : 0;
  for (int j = 0; j < late; ++j) {
    ConsumerPlan c;
    c.b = rng.Int(1, int(p.max_batch));
    c.depth = rng.Int(1, 3);
    c.epochs = rng.Int(1, 2);
    c.hold = rng.Int(1, c.depth);
    c.seed = seed * 131 + 100 + uint64_t(j);
    c.late_after = trigger;
    max_depth = std::max(max_depth, c.depth);
    s.consumers.push_back(c);
  }
  // A late joiner starts at an epoch boundary after its trigger's sync point; the leader
  // may run a whole ring ahead of the parked trigger (many epochs when an epoch is one
  // producer batch), so the stream has room to spare (it ends once everyone has left).
  if (late > 0) epochs = 2 * epochs + 12;
  // Views (a leader or service): consumers in up to three groups beside the leader's view,
  // each checking its group's bytes; late joiners may bring a view nobody has yet. Drawn
  // from a stream of their own, so that every seed's schedule is the one it was before views.
  Rng view_rng(seed * 0xD1B54A32D192ED03ULL + static_cast<uint64_t>(kind) + 7);
  // Not with the external producer (batches from the user's iterable) nor the multi-node
  // leader (its exchange feed): both refuse consumers' views (Feed::ViewSource).
  if ((kind == ProducerKind::kLeader || kind == ProducerKind::kService) && !tame &&
      view_rng.Coin(0.5)) {
    p.views_max = 4;
    const int sizes[] = {0, 0, 2, 3, 5};
    for (ConsumerPlan& c : s.consumers) c.view = sizes[view_rng.Int(0, 4)];
    // In most of these, the consumers of size 5 (and some of the leader's view) take a
    // schedule of sizes by epoch instead, view(resize=A@0:B@k[:C@k+j]): sizes 1..5 (the
    // groups fit the same room as with a fixed 5), the steps within the stream's first
    // epochs. They check each batch's bytes at its epoch's size. Those started with the
    // leader run past the first step (late joiners come when they come).
    if (view_rng.Coin(0.6)) {
      std::vector<ConsumerPlan*> scheduled;
      for (ConsumerPlan& c : s.consumers)
        if (c.view == 5 || (c.view == 0 && view_rng.Coin(0.3))) scheduled.push_back(&c);
      if (!scheduled.empty() && epochs < 2) epochs = 2;  // no late joiners: they make >= 14
      const int a = view_rng.Int(1, 5);
      int b = view_rng.Int(1, 4);
      if (b >= a) ++b;
      const int k = view_rng.Int(1, std::max(1, std::min(epochs - 1, 3)));
      std::string resize = std::to_string(a) + "@0:" + std::to_string(b) + "@" + std::to_string(k);
      if (k + 1 < epochs && view_rng.Coin(0.3)) {
        int c = view_rng.Int(1, 4);
        if (c >= b) ++c;
        const int at = view_rng.Int(k + 1, std::min(epochs - 1, k + 2));
        resize += ":" + std::to_string(c) + "@" + std::to_string(at);
      }
      for (ConsumerPlan* c : scheduled) {
        c->view = 0;
        c->resize = resize;
        if (c->late_after < 0) c->epochs = std::max(c->epochs, k + 1);
      }
    }
  }
  // The service runs epochs until stopped, like `batchcast serve` (the driver stops it).
  p.epochs = kind == ProducerKind::kService ? 0 : epochs;
  p.expect = initial;
  p.buffer_depth = max_depth;
  const int slot_roll = rng.Int(0, 2);
  p.ring_slots = slot_roll == 0 ? 0 : max_depth + 1 + slot_roll;
  // Scripts.
  for (int i = 0; i < static_cast<int>(s.consumers.size()); ++i) {
    ConsumerPlan& c = s.consumers[size_t(i)];
    const int64_t total = BatchesPerEpoch(p.samples, p.producer_batch, c.b) * c.epochs;
    const int most = static_cast<int>(std::min<int64_t>(total - 1, 20));
    std::string event;
    int nexts = rng.Int(0, std::max(0, most));
    int event_at = rng.Int(0, nexts);
    if (i == victim && chaos != Chaos::kNone && chaos != Chaos::kImpostor) {
      nexts = rng.Int(1, std::max(1, most));
      event_at = rng.Int(1, nexts);
      event = chaos == Chaos::kConsumerStop ? "s:cstop" : chaos == Chaos::kLeaderStop ? "s:lstop"
            : chaos == Chaos::kKill ? "s:kill" : "W";
    } else if (i == trigger) {
      event = "s:late";
    }
    int held = 0;
    c.script = Prefix(rng, c, nexts, event_at, event, &held);
    if (i == victim && chaos == Chaos::kConsumerStop) {
      // The rest after resuming: one Next (must fail), then verify and release.
      c.script = c.script.substr(0, c.script.find("s:cstop") + 7) + ",n";
      c.tail = "stop";
      c.expect = Expect::kEvicted;
      continue;
    }
    if (i == victim && chaos == Chaos::kWrite) {
      c.script = c.script.substr(0, c.script.find("W") + 1) + ",q";
      c.tail = "stop";
      c.expect = Expect::kWriteFaults;
      continue;
    }
    if (i == victim && chaos == Chaos::kKill) {
      c.expect = Expect::kKilled;
      continue;
    }
    if (chaos == Chaos::kLeaderStop) {
      c.expect = Expect::kLeaderLost;
      continue;
    }
    const int ending = tame ? (rng.Coin(0.2) ? 85 : 0) : rng.Int(0, 99);  // tame: drain or quit
    if (ending < 70) {
      c.tail = "drain";
    } else if (ending < 80 && c.depth >= 2) {
      c.tail = "keep";  // finishes, keeps its last batch until everyone else is done
    } else if (ending < 90) {
      // Leaving before the first batch would leave a leader waiting for its expected
      // consumers forever (an MPI job failure); leave after one at least.
      const bool took = c.script.find('n') != std::string::npos;
      c.script += std::string(c.script.empty() ? "" : ",") + (took ? "q" : "n,q");
      c.tail = "stop";
      c.expect = Expect::kEarlyEnd;
    } else if (nexts < most) {
      // Detach (or destroy the Consumer) while holding, wait for everyone else, verify.
      c.script += std::string(c.script.empty() ? "" : ",") + (held >= c.hold ? "r,n," : "n,") +
                  (rng.Coin(0.5) ? "D" : "X") + ",s:others";
      c.tail = "stop";
      c.expect = Expect::kEarlyEnd;
    }
  }
  if (chaos == Chaos::kImpostor) {
    s.impostor = true;
    ConsumerPlan probe;
    probe.name = "probe";
    probe.script = "q";
    probe.tail = "stop";
    probe.expect = Expect::kAttachRefused;
    s.consumers.push_back(probe);
  }
  *chaos_out = chaos;
  return s;
}

std::string Describe(const Scenario& s, Chaos chaos) {
  const ProducerSpec& p = s.producer;
  std::string d = std::string(ProducerName(p.kind)) + " N=" + std::to_string(p.samples) +
                  " P=" + std::to_string(p.producer_batch) + " slots=" + std::to_string(p.ring_slots) +
                  " epochs=" + std::to_string(p.epochs) + " chaos=" + ChaosName(chaos) + " consumers:";
  for (const auto& c : s.consumers)
    d += " [b=" + std::to_string(c.b) + " d=" + std::to_string(c.depth) + " e=" +
         std::to_string(c.epochs) + " h=" + std::to_string(c.hold) +
         (c.view > 0 ? " view=" + std::to_string(c.view) : "") +
         (c.resize.empty() ? "" : " resize=" + c.resize) + " " + ExpectName(c.expect) +
         (c.late_after >= 0 ? " late" : "") + " tail=" + c.tail + " '" + c.script + "']";
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<ProducerKind> kinds;
  uint64_t first = 1;
  int seeds = 20;
  bool keep_going = false, verbose = false, one = false, tame = false;
  int64_t deadline = 45000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--producer") {
      std::string v = val();
      if (v == "all") {
        kinds = {ProducerKind::kLeader, ProducerKind::kService, ProducerKind::kExternal};
      } else {
        ProducerKind k;
        if (!ParseProducer(v, &k)) {
          std::fprintf(stderr, "protocol_random: unknown producer '%s'\n", v.c_str());
          return 2;
        }
        kinds.push_back(k);
      }
    } else if (a == "--seed") {
      first = std::strtoull(val().c_str(), nullptr, 10);
      seeds = 1;
      one = true;
    } else if (a == "--seeds") {
      seeds = std::atoi(val().c_str());
    } else if (a == "--first") {
      first = std::strtoull(val().c_str(), nullptr, 10);
    } else if (a == "--keep-going") {
      keep_going = true;
    } else if (a == "--deadline-ms") {
      deadline = std::atoll(val().c_str());
    } else if (a == "--tame") {
      tame = true;
    } else if (a == "-v") {
      verbose = true;
    } else {
      std::fprintf(stderr, "usage: protocol_random --producer leader|service|external|multinode|all "
                           "[--seeds K] [--first S] [--seed S] [--keep-going] [--deadline-ms MS] [--tame] [-v]\n");
      return 2;
    }
  }
  if (kinds.empty()) kinds = {ProducerKind::kLeader};
  if (const char* env = std::getenv("BC_PROTOCOL_SEEDS"); env != nullptr && !one) seeds = std::atoi(env);
  const std::string bin = ProgramDir(argv[0]);
  int failed = 0, passed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (ProducerKind kind : kinds) {
    for (uint64_t seed = first; seed < first + uint64_t(seeds); ++seed) {
      Chaos chaos;
      Scenario s = Generate(kind, seed, tame, &chaos);
      s.deadline_ms = deadline;
      const std::string desc = Describe(s, chaos);
      const auto t = std::chrono::steady_clock::now();
      Engine engine(s, bin, std::string(ProducerName(kind)) + "-" + std::to_string(seed));
      std::vector<std::string> v = engine.Run();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
      if (verbose || one)
        std::printf("seed %llu %s: %s (%.2f s)\n  %s\n", (unsigned long long)seed,
                    ProducerName(kind), v.empty() ? "ok" : "FAILED", secs, desc.c_str());
      if (v.empty()) {
        ++passed;
        continue;
      }
      ++failed;
      std::printf("\nFAILED: seed %llu, producer %s (%.2f s)\n  schedule: %s\n",
                  (unsigned long long)seed, ProducerName(kind), secs, desc.c_str());
      for (const auto& why : v) std::printf("  - %s\n", why.c_str());
      std::printf("  replay: %s/protocol_random --seed %llu --producer %s%s\n\n", bin.c_str(),
                  (unsigned long long)seed, ProducerName(kind), tame ? " --tame" : "");
      std::fflush(stdout);
      if (!keep_going) break;
    }
    if (failed > 0 && !keep_going) break;
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("protocol_random: %d seeds passed, %d failed in %.1f s\n", passed, failed, total);
  return failed == 0 ? 0 : 1;
}
