// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The per-trial ledger of a leader (docs/telemetry.md "Trials and cost"): a record for every
// consumer that was admitted to its stream (a trial attached to `batchcast serve`, a trainer
// rank, a Python Consumer), kept when it detaches, dies or is killed, with what it received
// and what it cost:
//
//   - received: batches, samples and bytes published to it, epochs it got batches of;
//   - its own CPU seconds and peak RSS since it was admitted, read from /proc/<pid> every
//     sampling interval (a SIGKILLed trial keeps what was read before it died);
//   - its share of the leader: in every sampling interval, the leader process's CPU seconds,
//     GPU seconds, package energy and bytes per transport are split over the trials in
//     proportion to the samples published to each in that interval. An interval in which nobody
//     received anything is "unattributed" (start-up, pauses, the end).
//   - energy: a process is charged the node's RAPL package energy of an interval in
//     proportion to its CPU seconds over the node's busy CPU seconds; a trial's energy is its
//     own charge plus its share of the leader's.
//
// Thread-safe: Admit/Leave come from the ring's control thread, Deliver from the producer
// thread (once per producer batch), Apportion from the collector's sampler thread.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace batchcast::telemetry {

inline constexpr int kNumTransports = 5;  // shm, mpi, h2d, ipc, nccl (Counter::kBytesShm..)

// How a trial's stream ended.
enum class TrialEnd : int {
  kAttached = 0,  // still attached when the leader finished
  kDetached,      // left normally (Detach, end of its epochs)
  kDied,          // its connection closed without a detach: the process died or was killed
  kSilent,        // stopped heart-beating (stopped, hung) and was evicted
};
std::string_view TrialEndName(TrialEnd e);  // "attached", "detached", "died", "silent"
bool ParseTrialEnd(std::string_view text, TrialEnd* out);

struct TrialRecord {
  uint32_t member = 0;  // the ring's member id (ids are reused after a trial leaves)
  int pid = 0;          // the trial's process (credential-checked by the ring)
  int rank = -1;
  std::string name;     // what the trial called itself (Consumer::Attach's name, run_name)
  double attach_s = 0;  // seconds since the leader's collector started
  double leave_s = std::numeric_limits<double>::quiet_NaN();  // NaN: attached at the end
  TrialEnd end = TrialEnd::kAttached;
  // What it received.
  int64_t batches = 0, samples = 0, bytes = 0;
  int64_t epochs = 0;  // distinct epochs it received batches of
  // Its own process, since admission (NaN: not readable, or it runs inside the leader's
  // process so that its CPU cannot be told apart; own_note says which).
  double own_cpu_s = std::numeric_limits<double>::quiet_NaN();
  int64_t own_peak_rss_bytes = 0;
  double own_energy_j = std::numeric_limits<double>::quiet_NaN();
  std::string own_note;
  // Its share of the leader process.
  double leader_cpu_s = 0;
  double leader_gpu_s = std::numeric_limits<double>::quiet_NaN();    // NaN: no GPU
  double leader_energy_j = std::numeric_limits<double>::quiet_NaN(); // NaN: no energy
  double transport_bytes[kNumTransports] = {};
};

// What the leader spent that no trial received anything of, and how much it produced for
// at least one trial (the denominator of the saving, docs/telemetry.md "Cost model").
struct LedgerTotals {
  double unattributed_cpu_s = 0;
  double unattributed_gpu_s = std::numeric_limits<double>::quiet_NaN();
  double unattributed_energy_j = std::numeric_limits<double>::quiet_NaN();
  int64_t samples_published = 0;  // samples of producer batches that reached >= 1 trial
  int64_t batches_published = 0;
  int64_t epochs_published = 0;   // distinct epochs of those batches
};

// One sampling interval of the leader process (deltas since the previous one).
struct IntervalCost {
  double cpu_s = 0;                                            // leader process CPU
  double gpu_s = std::numeric_limits<double>::quiet_NaN();     // GPU util x interval; NaN: none
  double package_j = std::numeric_limits<double>::quiet_NaN(); // node RAPL energy; NaN: none
  double node_busy_s = std::numeric_limits<double>::quiet_NaN();  // node busy CPU seconds
  double bytes[kNumTransports] = {};
};

class TrialLedger {
 public:
  // `self_pid`: the leader's own process (a trial with this pid runs inside it).
  explicit TrialLedger(int self_pid);

  // A consumer was admitted at `now_s`; reads its /proc entry as the baseline of its own CPU.
  void Admit(uint32_t member, int pid, int rank, std::string name, double now_s);
  // It left at `now_s`; its record is kept (and still receives its share of this interval).
  void Leave(uint32_t member, TrialEnd how, double now_s);
  // A producer batch of `samples` samples (`bytes` bytes) of `epoch` went to the members in
  // `receivers` (bit i = member i). A member that left after the publish chose it (the ring
  // reaps on its control thread) is credited to the record it left, as long as no other
  // trial was admitted under its id since; a member never seen admitted gets a record.
  void Deliver(uint64_t receivers, int64_t samples, int64_t bytes, uint64_t epoch, double now_s);
  // Splits one interval's cost over the trials that received in it and reads every attached
  // trial's /proc entry (sampler thread).
  void Apportion(const IntervalCost& cost);
  // Every record so far (admission order), open ones as attached.
  std::vector<TrialRecord> Records() const;
  LedgerTotals Totals() const;
  bool empty() const;

 private:
  struct Open {
    size_t record = 0;         // index into records_
    int64_t pending = 0;       // samples received since the last Apportion
    double last_cpu_s = 0;     // its process's CPU at the last read
    uint64_t start_ticks = 0;  // its process's start time (a reused pid reads differently)
    bool readable = false;
    bool closed = false;       // left; dropped after its last Apportion
  };
  Open& OpenFor(uint32_t member, double now_s);  // mu_ held
  Open& LeavingFor(size_t record);                 // mu_ held: a left record's pending entry
  void ReadOwn(Open& o, TrialRecord& r, double share_j_per_cpu_s);

  const int self_pid_;
  mutable std::mutex mu_;
  std::vector<TrialRecord> records_;
  std::vector<std::vector<uint64_t>> epochs_seen_;  // per record: the epochs it got
  std::map<uint32_t, Open> open_;                    // member id -> its current record
  std::map<uint32_t, size_t> last_left_;             // member id -> the record it last left
  std::vector<Open> leaving_;                        // left since the last Apportion
  LedgerTotals totals_;
  std::vector<uint64_t> epochs_published_;
};

}  // namespace batchcast::telemetry
