// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/trial_ledger.h"

#include <algorithm>
#include <cmath>

#include "telemetry/process_stats.h"

namespace batchcast::telemetry {
namespace {

constexpr std::string_view kEndNames[] = {"attached", "detached", "died", "silent"};

void AddSeen(std::vector<uint64_t>* seen, uint64_t epoch) {
  if (std::find(seen->begin(), seen->end(), epoch) == seen->end()) seen->push_back(epoch);
}

// a += b, where NaN + x = x for the running total (b NaN: nothing measured, a unchanged).
void AddMeasured(double* a, double b) {
  if (std::isnan(b)) return;
  *a = std::isnan(*a) ? b : *a + b;
}

}  // namespace

std::string_view TrialEndName(TrialEnd e) { return kEndNames[static_cast<int>(e)]; }

bool ParseTrialEnd(std::string_view text, TrialEnd* out) {
  for (int i = 0; i < 4; ++i)
    if (text == kEndNames[i]) {
      *out = static_cast<TrialEnd>(i);
      return true;
    }
  return false;
}

TrialLedger::TrialLedger(int self_pid) : self_pid_(self_pid) {}

TrialLedger::Open& TrialLedger::LeavingFor(size_t record) {
  for (Open& o : leaving_)
    if (o.record == record) return o;
  Open o;  // already apportioned once after it left: carries only this late share
  o.record = record;
  o.closed = true;
  leaving_.push_back(o);
  return leaving_.back();
}

TrialLedger::Open& TrialLedger::OpenFor(uint32_t member, double now_s) {
  auto it = open_.find(member);
  if (it != open_.end()) return it->second;
  if (auto left = last_left_.find(member); left != last_left_.end())
    return LeavingFor(left->second);  // published to it just before it left
  // Delivered to a member this ledger did not see admitted (admitted before the collector
  // existed): a record without a process to read.
  TrialRecord r;
  r.member = member;
  r.name = "member " + std::to_string(member);
  r.attach_s = now_s;
  r.own_note = "admitted before telemetry started: its process is unknown";
  records_.push_back(std::move(r));
  epochs_seen_.emplace_back();
  Open o;
  o.record = records_.size() - 1;
  return open_.emplace(member, o).first->second;
}

void TrialLedger::Admit(uint32_t member, int pid, int rank, std::string name, double now_s) {
  std::lock_guard lock(mu_);
  if (auto it = open_.find(member); it != open_.end()) {  // a Leave we did not see
    it->second.closed = true;
    leaving_.push_back(it->second);
    open_.erase(it);
  }
  last_left_.erase(member);  // the id is someone else's from now on
  TrialRecord r;
  r.member = member;
  r.pid = pid;
  r.rank = rank;
  r.name = name.empty() ? "pid " + std::to_string(pid) : std::move(name);
  r.attach_s = now_s;
  Open o;
  o.record = records_.size();
  if (pid == self_pid_) {
    r.own_note = "runs inside the leader's process: its own CPU cannot be told apart";
  } else if (OtherProcess p; ReadOtherProcess(pid, &p)) {
    o.readable = true;
    o.last_cpu_s = p.cpu_s;
    o.start_ticks = p.start_ticks;
    r.own_cpu_s = 0;
    r.own_peak_rss_bytes = p.rss_bytes;
  } else {
    r.own_note = "its /proc entry is not readable from the leader (another pid namespace?)";
  }
  records_.push_back(std::move(r));
  epochs_seen_.emplace_back();
  open_[member] = o;
}

void TrialLedger::Leave(uint32_t member, TrialEnd how, double now_s) {
  std::lock_guard lock(mu_);
  auto it = open_.find(member);
  if (it == open_.end()) return;
  TrialRecord& r = records_[it->second.record];
  r.leave_s = now_s;
  r.end = how;
  it->second.closed = true;
  leaving_.push_back(it->second);
  last_left_[member] = it->second.record;
  open_.erase(it);
}

void TrialLedger::Deliver(uint64_t receivers, int64_t samples, int64_t bytes, uint64_t epoch,
                          double now_s) {
  if (receivers == 0) return;
  std::lock_guard lock(mu_);
  totals_.samples_published += samples;
  totals_.batches_published += 1;
  AddSeen(&epochs_published_, epoch);
  totals_.epochs_published = static_cast<int64_t>(epochs_published_.size());
  for (uint64_t m = receivers; m != 0; m &= m - 1) {
    const auto member = static_cast<uint32_t>(__builtin_ctzll(m));
    Open& o = OpenFor(member, now_s);
    TrialRecord& r = records_[o.record];
    r.batches += 1;
    r.samples += samples;
    r.bytes += bytes;
    o.pending += samples;
    AddSeen(&epochs_seen_[o.record], epoch);
    r.epochs = static_cast<int64_t>(epochs_seen_[o.record].size());
  }
}

// Reads the trial's process: its CPU since the last read (and its charge of the interval's
// package energy), and its RSS. A process that is gone, or whose pid now names another
// process, is read no more.
void TrialLedger::ReadOwn(Open& o, TrialRecord& r, double share_j_per_cpu_s) {
  if (!o.readable) return;
  OtherProcess p;
  if (!ReadOtherProcess(r.pid, &p) || p.start_ticks != o.start_ticks) {
    o.readable = false;
    return;
  }
  const double d = std::max(0.0, p.cpu_s - o.last_cpu_s);
  o.last_cpu_s = p.cpu_s;
  r.own_cpu_s += d;
  r.own_peak_rss_bytes = std::max(r.own_peak_rss_bytes, p.rss_bytes);
  if (!std::isnan(share_j_per_cpu_s)) AddMeasured(&r.own_energy_j, d * share_j_per_cpu_s);
}

void TrialLedger::Apportion(const IntervalCost& c) {
  std::lock_guard lock(mu_);
  // Joules per busy CPU second of the node in this interval (NaN without RAPL).
  const double j_per_cpu_s = c.node_busy_s > 0 ? c.package_j / c.node_busy_s
                                               : std::numeric_limits<double>::quiet_NaN();
  const double leader_j =
      std::isnan(j_per_cpu_s) ? j_per_cpu_s : std::min(c.package_j, c.cpu_s * j_per_cpu_s);
  int64_t total = 0;
  for (const auto& [member, o] : open_) total += o.pending;
  for (const Open& o : leaving_) total += o.pending;
  auto share = [&](Open& o) {
    TrialRecord& r = records_[o.record];
    ReadOwn(o, r, j_per_cpu_s);
    if (o.pending == 0 || total == 0) return;
    const double w = static_cast<double>(o.pending) / static_cast<double>(total);
    o.pending = 0;
    r.leader_cpu_s += w * c.cpu_s;
    if (!std::isnan(c.gpu_s)) AddMeasured(&r.leader_gpu_s, w * c.gpu_s);
    if (!std::isnan(leader_j)) AddMeasured(&r.leader_energy_j, w * leader_j);
    for (int t = 0; t < kNumTransports; ++t) r.transport_bytes[t] += w * c.bytes[t];
  };
  for (auto& [member, o] : open_) share(o);
  for (Open& o : leaving_) share(o);
  leaving_.clear();
  if (total == 0) {
    totals_.unattributed_cpu_s += c.cpu_s;
    AddMeasured(&totals_.unattributed_gpu_s, c.gpu_s);
    AddMeasured(&totals_.unattributed_energy_j, leader_j);
  }
}

std::vector<TrialRecord> TrialLedger::Records() const {
  std::lock_guard lock(mu_);
  return records_;
}

LedgerTotals TrialLedger::Totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

bool TrialLedger::empty() const {
  std::lock_guard lock(mu_);
  return records_.empty();
}

}  // namespace batchcast::telemetry
