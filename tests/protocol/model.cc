// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The reference model: what each consumer must have reported, given its plan.
//   - every batch's bytes, labels and ids are the source's at receipt (content.h), and its
//     checksum at release equals its checksum at receipt (nobody changed a held batch);
//   - per epoch: every sample exactly once, plus exactly the fill repeats it reported
//     (BatchInfo::repeats), for every epoch it completed; never an unexplained duplicate;
//   - it ends as its plan says (complete / early / evicted / leader lost / refused ...);
//   - after everything is released and the Consumer destroyed: no fd, thread or segment
//     mapping more than before Attach.
#include <sys/wait.h>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/protocol/harness.h"

namespace batchcast::protocol_test {
namespace {

struct Recv {
  int tag = 0;
  uint64_t epoch = 0, index = 0, seq = 0;
  int64_t size = 0, repeats = 0;
  bool last = false;
  uint64_t checksum = 0;
  int64_t bad = 0;
  std::vector<int64_t> ids;
};

bool Starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ContainsAny(const std::string& s, std::initializer_list<const char*> words) {
  const std::string l = Lower(s);
  for (const char* w : words)
    if (l.find(w) != std::string::npos) return true;
  return false;
}

}  // namespace

void Engine::CheckConsumer(int i) {
  const ConsumerRun& r = runs_[size_t(i)];
  const ConsumerPlan& plan = s_.consumers[size_t(i)];
  const std::string who = "consumer " + std::to_string(i) + " (" + ExpectName(plan.expect) + ")";
  auto fail = [&](const std::string& why) { Fail(who + ": " + why); };
  if (!r.started) {
    if (plan.expect != Expect::kKilled && plan.expect != Expect::kAttachRefused)
      fail("never started");
    return;
  }
  std::map<int, Recv> recvs;
  std::vector<int> order;
  std::map<int, bool> released;
  std::string end, attach_error, final_line;
  bool write_ok = false;
  int cstop_at = -1, first_after_cstop = -1;  // line indexes
  for (size_t k = 0; k < r.lines.size(); ++k) {
    const std::string& l = r.lines[k];
    std::istringstream in(l);
    std::string word;
    in >> word;
    if (word == "recv") {
      Recv v;
      in >> v.tag >> v.epoch >> v.index >> v.seq >> v.size >> v.repeats >> v.last >> v.checksum >> v.bad;
      int64_t id;
      while (in >> id) v.ids.push_back(id);
      if (v.bad != 0)
        fail("batch " + std::to_string(v.tag) + " (epoch " + std::to_string(v.epoch) + ", position " +
             std::to_string(v.seq) + ") arrived with " + std::to_string(v.bad) +
             " samples whose bytes or label are not the source's");
      if (static_cast<int64_t>(v.ids.size()) != v.size) fail("malformed line: " + l);
      recvs[v.tag] = v;
      order.push_back(v.tag);
    } else if (word == "rel") {
      int tag;
      uint64_t sum;
      int64_t bad;
      in >> tag >> sum >> bad;
      released[tag] = true;
      auto it = recvs.find(tag);
      if (it == recvs.end()) fail("released unknown batch " + std::to_string(tag));
      else if (plan.expect == Expect::kWriteFaults)
        continue;  // it changed its own batch (the model flags the write itself)
      else if (sum != it->second.checksum || bad != 0)
        fail("held batch " + std::to_string(tag) + " (epoch " + std::to_string(it->second.epoch) +
             ", position " + std::to_string(it->second.seq) + ") changed while held: checksum " +
             std::to_string(it->second.checksum) + " at receipt, " + std::to_string(sum) +
             " at release, " + std::to_string(bad) + " samples not the source's");
    } else if (word == "eos" || word == "next-error") {
      if (end.empty()) end = l;
    } else if (word == "attach-error") {
      attach_error = l;
    } else if (word == "write-ok") {
      write_ok = true;
    } else if (word == "final") {
      final_line = l;
    } else if (l == "sync cstop") {
      cstop_at = static_cast<int>(k);
    }
    if (cstop_at >= 0 && first_after_cstop < 0 && static_cast<int>(k) > cstop_at &&
        (word == "recv" || word == "eos" || word == "next-error"))
      first_after_cstop = static_cast<int>(k);
  }
  const std::string err_text = [&] {
    std::ifstream in(r.err_path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  const bool clean_exit = WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0;

  switch (plan.expect) {
    case Expect::kAttachRefused: {
      if (attach_error.empty()) {
        fail("attached to an impostor (" + impostor_info_ + ") instead of refusing it");
        return;
      }
      std::istringstream in(impostor_info_);
      std::string ready, pid, uid;
      in >> ready >> pid >> uid;
      if (attach_error.find(uid) == std::string::npos || attach_error.find(pid) == std::string::npos)
        fail("refused the impostor but does not name its uid " + uid + " and pid " + pid + ": " +
             attach_error);
      return;
    }
    case Expect::kAttachError:
      if (attach_error.empty()) fail("Attach succeeded; expected a clear error");
      else if (!ContainsAny(attach_error, {"epoch"}))
        fail("the Attach error does not say why (epochs): " + attach_error);
      return;
    case Expect::kWriteFaults:
      if (write_ok)
        fail("wrote into a shared batch through a const_cast pointer and went on (batch memory "
             "must be read-only for consumers)");
      else if (clean_exit)
        fail("exited normally after a write into a shared batch");
      else if (!ContainsAny(err_text, {"batch"}))
        fail("died after writing into a shared batch without a message naming the batch; stderr: " +
             err_text.substr(0, 300));
      break;
    default:
      break;
  }
  if (!attach_error.empty()) {
    if (plan.expect == Expect::kCompleteOrError && attach_error.size() > 20) return;
    fail("Attach failed: " + attach_error);
    return;
  }
  const bool prefix_only = plan.expect == Expect::kKilled || plan.expect == Expect::kWriteFaults;
  if (!prefix_only) {
    if (!clean_exit) fail("exited with " + std::to_string(r.wait_status) + " (stderr: " + r.err_path + ")");
    for (int tag : order)
      if (!released[tag]) fail("batch " + std::to_string(tag) + " was never released and verified");
    int fb = 0, fa = 0, tb = 0, ta = 0, maps = 0;
    long long epochs = 0, repeats = 0;
    if (final_line.empty() ||
        std::sscanf(final_line.c_str(), "final fds %d %d tasks %d %d maps %d epochs %lld repeats %lld",
                    &fb, &fa, &tb, &ta, &maps, &epochs, &repeats) != 7) {
      fail("no final report");
    } else {
      if (fa != fb) fail("leaked fds: " + std::to_string(fb) + " before Attach, " + std::to_string(fa) +
                         " after everything was released and destroyed");
      if (ta != tb) fail("leaked threads: " + std::to_string(tb) + " before Attach, " + std::to_string(ta) + " after");
      if (maps != 0) fail(std::to_string(maps) + " segment mappings left after everything was released");
    }
  }
  // Exactly once per completed epoch, plus exactly the reported repeats.
  std::map<uint64_t, std::map<int64_t, int>> counts;
  std::map<uint64_t, int64_t> reps;
  std::map<uint64_t, bool> completed;
  for (int tag : order) {
    const Recv& v = recvs[tag];
    for (int64_t id : v.ids) counts[v.epoch][id] += 1;
    reps[v.epoch] += v.repeats;
    if (v.last) completed[v.epoch] = true;
  }
  const int64_t n = s_.producer.samples;
  int done = 0;
  for (const auto& [epoch, c] : counts) {
    int64_t dups = 0;
    for (const auto& [id, k] : c) dups += k - 1;
    const std::string e = "epoch " + std::to_string(epoch);
    if (completed[epoch]) {
      ++done;
      if (static_cast<int64_t>(c.size()) != n)
        fail(e + " completed with " + std::to_string(c.size()) + " of " + std::to_string(n) +
             " samples (missed " + std::to_string(n - int64_t(c.size())) + ")");
      if (dups != reps[epoch])
        fail(e + ": " + std::to_string(dups) + " duplicate samples but " +
             std::to_string(reps[epoch]) + " fill repeats reported");
    } else if (dups > reps[epoch]) {
      fail(e + " (incomplete): " + std::to_string(dups) + " duplicates exceed the " +
           std::to_string(reps[epoch]) + " fill repeats reported");
    }
  }
  switch (plan.expect) {
    case Expect::kComplete:
      if (!Starts(end, "eos")) fail("did not reach the end of its stream: " + (end.empty() ? "(none)" : end));
      if (done != plan.epochs || static_cast<int>(counts.size()) != plan.epochs)
        fail("completed " + std::to_string(done) + " epochs and saw " + std::to_string(counts.size()) +
             ", asked for " + std::to_string(plan.epochs));
      break;
    case Expect::kEarlyEnd:
      if (Starts(end, "next-error")) fail("unexpected error: " + end);
      break;
    case Expect::kCompleteOrError:
      if (Starts(end, "next-error")) break;  // a clear error is acceptable
      if (!Starts(end, "eos") || done != plan.epochs || static_cast<int>(counts.size()) != plan.epochs)
        fail("ended silently (" + (end.empty() ? std::string("(none)") : end) + ") after " +
             std::to_string(done) + " complete epochs of " + std::to_string(plan.epochs) +
             " asked; expected them all or a clear error");
      break;
    case Expect::kEvicted:
      if (r.stop_outlived_leader) break;
      if (cstop_at < 0) fail("never reached its stop point");
      else if (first_after_cstop < 0 || !Starts(r.lines[size_t(first_after_cstop)], "next-error"))
        fail("resumed after being evicted and Next() did not fail: " +
             (first_after_cstop < 0 ? std::string("(nothing)") : r.lines[size_t(first_after_cstop)].substr(0, 120)));
      break;
    case Expect::kLeaderLost:
      if (Starts(end, "eos")) {
        if (done != plan.epochs) fail("ended with fewer epochs than asked after the leader stopped");
      } else if (!Starts(end, "next-error") || !ContainsAny(end, {"leader"}) ||
                 !ContainsAny(end, {"sign of life", "heartbeat", "not responding", "hung", "stopped",
                                    "silent", "alive"})) {
        fail("the leader was stopped past the heartbeat; expected an error saying the leader "
             "shows no sign of life, got: " + (end.empty() ? "(nothing)" : end));
      }
      break;
    default:
      break;
  }
}

}  // namespace batchcast::protocol_test
