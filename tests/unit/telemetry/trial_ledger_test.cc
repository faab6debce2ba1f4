// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The per-trial ledger (telemetry/trial_ledger.h) against hand-computed splits: the leader's
// cost of each interval goes to the trials in proportion to the samples each received in
// it, a trial that leaves keeps its record and its last share, an interval nobody received
// in is unattributed, energy follows CPU shares, and a trial's own CPU is read from /proc
// (kept after the trial is killed). The summary's cost and saving follow from the records.
#include "telemetry/trial_ledger.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "telemetry/rank_data.h"
#include "telemetry/summary.h"

namespace batchcast::telemetry {
namespace {

IntervalCost Cost(double cpu, double package_j = NAN, double node_busy = NAN) {
  IntervalCost c;
  c.cpu_s = cpu;
  c.package_j = package_j;
  c.node_busy_s = node_busy;
  c.bytes[0] = 1000;  // shm bytes moved by the leader in the interval
  return c;
}

TEST(TrialLedgerTest, SplitsEachIntervalBySamplesReceivedInIt) {
  const int self = static_cast<int>(getpid());
  TrialLedger l(self);
  l.Admit(0, self, -1, "trial-a", 0.0);
  l.Admit(3, self, -1, "trial-b", 0.5);
  // Interval 1: a gets 3 batches of 10, b 1 batch: 30/40 and 10/40 of 2 CPU-s.
  l.Deliver(0b1001, 10, 100, 0, 0.6);
  l.Deliver(0b0001, 10, 100, 0, 0.7);
  l.Deliver(0b0001, 10, 100, 0, 0.8);
  l.Apportion(Cost(2.0));
  // Interval 2: nobody received: unattributed.
  l.Apportion(Cost(0.5));
  // Interval 3: b alone, in epoch 1; then a leaves (killed).
  l.Deliver(0b1000, 20, 200, 1, 2.0);
  l.Leave(0, TrialEnd::kDied, 2.1);
  l.Apportion(Cost(1.0));
  auto r = l.Records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].name, "trial-a");
  EXPECT_EQ(r[0].end, TrialEnd::kDied);
  EXPECT_DOUBLE_EQ(r[0].leave_s, 2.1);
  EXPECT_EQ(r[0].samples, 30);
  EXPECT_EQ(r[0].batches, 3);
  EXPECT_EQ(r[0].bytes, 300);
  EXPECT_EQ(r[0].epochs, 1);
  EXPECT_DOUBLE_EQ(r[0].leader_cpu_s, 1.5);
  EXPECT_DOUBLE_EQ(r[0].transport_bytes[0], 750);
  EXPECT_EQ(r[1].end, TrialEnd::kAttached);
  EXPECT_TRUE(std::isnan(r[1].leave_s));
  EXPECT_EQ(r[1].samples, 30);
  EXPECT_EQ(r[1].epochs, 2);
  EXPECT_DOUBLE_EQ(r[1].leader_cpu_s, 0.5 + 1.0);
  // Trials inside the leader's process: their own CPU cannot be told apart.
  EXPECT_TRUE(std::isnan(r[0].own_cpu_s));
  EXPECT_NE(r[0].own_note.find("inside the leader's process"), std::string::npos);
  LedgerTotals t = l.Totals();
  EXPECT_DOUBLE_EQ(t.unattributed_cpu_s, 0.5);
  EXPECT_EQ(t.samples_published, 50);
  EXPECT_EQ(t.batches_published, 4);
  EXPECT_EQ(t.epochs_published, 2);
  EXPECT_TRUE(std::isnan(r[0].leader_energy_j)) << "no energy measured: n/a, not 0";
}

TEST(TrialLedgerTest, EnergyFollowsTheLeadersShareOfTheNodesBusyCpu) {
  TrialLedger l(static_cast<int>(getpid()));
  l.Admit(1, static_cast<int>(getpid()), -1, "a", 0);
  l.Admit(2, static_cast<int>(getpid()), -1, "b", 0);
  l.Deliver(0b110, 8, 0, 0, 0.1);
  // 100 J over 4 busy CPU-s of the node; the leader used 2 of them: 50 J, split 1:1.
  l.Apportion(Cost(2.0, 100.0, 4.0));
  auto r = l.Records();
  EXPECT_DOUBLE_EQ(r[0].leader_energy_j, 25.0);
  EXPECT_DOUBLE_EQ(r[1].leader_energy_j, 25.0);
  // An interval with no trial receiving: the leader's energy is unattributed.
  l.Apportion(Cost(1.0, 30.0, 3.0));
  EXPECT_DOUBLE_EQ(l.Totals().unattributed_energy_j, 10.0);
}

TEST(TrialLedgerTest, AMemberNotSeenAdmittedStillGetsARecordAndIdsAreReused) {
  TrialLedger l(static_cast<int>(getpid()));
  l.Deliver(1ULL << 5, 4, 40, 0, 1.0);
  l.Admit(5, static_cast<int>(getpid()), 2, "late", 2.0);  // id 5 reused by a new trial
  l.Deliver(1ULL << 5, 4, 40, 0, 2.5);
  l.Leave(5, TrialEnd::kDetached, 3.0);
  l.Leave(5, TrialEnd::kDied, 3.5);  // nothing open under id 5 any more: ignored
  auto r = l.Records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].name, "member 5");
  EXPECT_NE(r[0].own_note.find("before telemetry started"), std::string::npos);
  EXPECT_EQ(r[0].end, TrialEnd::kAttached) << "closed by the admission that reused its id";
  EXPECT_EQ(r[1].name, "late");
  EXPECT_EQ(r[1].rank, 2);
  EXPECT_EQ(r[1].end, TrialEnd::kDetached);
  EXPECT_EQ(r[1].samples, 4);
}

// The ring reaps a member on its control thread; a batch published to it just before can be
// recorded after: it is credited to the record the member left, not to a new "member N".
TEST(TrialLedgerTest, ABatchPublishedJustBeforeALeaveCountsForTheTrialThatLeft) {
  TrialLedger l(static_cast<int>(getpid()));
  l.Admit(2, static_cast<int>(getpid()), -1, "trial-0", 0);
  l.Deliver(1ULL << 2, 64, 640, 0, 0.5);
  l.Apportion(Cost(1.0));
  l.Leave(2, TrialEnd::kDetached, 1.0);
  l.Apportion(Cost(0.5));  // nothing received in this one: unattributed
  l.Deliver(1ULL << 2, 64, 640, 1, 1.1);  // published before the leave, recorded after
  l.Apportion(Cost(2.0));
  auto r = l.Records();
  ASSERT_EQ(r.size(), 1u) << "no record for a member that was never admitted";
  EXPECT_EQ(r[0].samples, 128);
  EXPECT_EQ(r[0].epochs, 2);
  EXPECT_EQ(r[0].end, TrialEnd::kDetached);
  EXPECT_DOUBLE_EQ(r[0].leader_cpu_s, 3.0);
  EXPECT_DOUBLE_EQ(l.Totals().unattributed_cpu_s, 0.5);
  l.Admit(2, static_cast<int>(getpid()), -1, "trial-1", 2.0);  // the id is reused
  l.Deliver(1ULL << 2, 64, 640, 1, 2.5);
  r = l.Records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].samples, 128);
  EXPECT_EQ(r[1].samples, 64);
}

// The ledger is fed from three threads at once in a service (the ring's control thread admits
// and reaps, the producer delivers, the sampler apportions): nothing is lost or counted
// twice. Every interval's CPU ends up with a trial or unattributed, every sample delivered is
// on the record of the member it went to.
TEST(TrialLedgerTest, ConcurrentAdmissionsDeliveriesAndApportioningConserveEverything) {
  const int self = static_cast<int>(getpid());
  TrialLedger l(self);
  constexpr int kMembers = 8, kRounds = 400, kIntervals = 300;
  std::atomic<bool> done{false};
  std::atomic<int64_t> delivered{0};
  std::thread control([&] {  // admits and reaps members, reusing ids
    for (int round = 0; round < kRounds; ++round) {
      const auto m = static_cast<uint32_t>(round % kMembers);
      l.Admit(m, self, round, "t" + std::to_string(round), 0);
      if (round >= kMembers) l.Leave((m + 1) % kMembers, TrialEnd::kDetached, 0);
    }
  });
  std::thread producer([&] {  // publishes to changing masks
    for (int i = 0; !done.load(); ++i) {
      const uint64_t mask = (0x5aULL * static_cast<uint64_t>(i + 1)) & ((1ULL << kMembers) - 1);
      if (mask == 0) continue;
      l.Deliver(mask, 3, 30, static_cast<uint64_t>(i / 50), 0);
      delivered.fetch_add(3 * __builtin_popcountll(mask));
    }
  });
  double spent = 0;
  for (int i = 0; i < kIntervals; ++i) {
    l.Apportion(Cost(0.25));
    spent += 0.25;
  }
  control.join();
  done.store(true);
  producer.join();
  l.Apportion(Cost(0.25));  // the last deliveries' interval
  spent += 0.25;
  double attributed = 0;
  int64_t samples = 0;
  for (const TrialRecord& r : l.Records()) {
    attributed += r.leader_cpu_s;
    samples += r.samples;
  }
  EXPECT_EQ(samples, delivered.load());
  EXPECT_NEAR(attributed + l.Totals().unattributed_cpu_s, spent, 1e-9 * spent);
}

// A real other process: its CPU is read from /proc while it runs, and the record keeps what
// was read after it is SIGKILLed. The ledger sees at most what the child used, and more than
// nothing once the child reported a round of work done.
TEST(TrialLedgerTest, ReadsAnotherProcessesCpuAndKeepsItAfterTheProcessIsKilled) {
  int go[2], done[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a round of CPU work per byte from the parent, each reported back
    close(go[1]);
    close(done[0]);
    volatile uint64_t x = 0;
    char c;
    while (read(go[0], &c, 1) == 1) {
      for (uint64_t i = 0; i < 50000000ULL; ++i) x = x + i;
      if (write(done[1], "d", 1) != 1) _exit(1);
    }
    _exit(0);
  }
  close(go[0]);
  close(done[1]);
  TrialLedger l(static_cast<int>(getpid()));
  l.Admit(0, static_cast<int>(child), -1, "child", 0);
  char c;
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(write(go[1], "g", 1), 1);
    ASSERT_EQ(read(done[0], &c, 1), 1);  // the round's CPU is spent: read it
    l.Apportion(Cost(0));
  }
  const double seen = l.Records()[0].own_cpu_s;
  kill(child, SIGKILL);
  int status = 0;
  rusage ru{};
  ASSERT_EQ(wait4(child, &status, 0, &ru), child);
  l.Leave(0, TrialEnd::kDied, 1.0);
  l.Apportion(Cost(0));  // the process is gone: nothing more is read, nothing lost
  auto r = l.Records()[0];
  const double used = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
                      ru.ru_stime.tv_usec * 1e-6;
  EXPECT_EQ(r.own_cpu_s, seen);
  EXPECT_GT(r.own_cpu_s, 0.0) << "three rounds of work were done before the reads";
  EXPECT_LE(r.own_cpu_s, used + 0.02);  // clock-tick rounding of /proc
  EXPECT_GT(r.own_peak_rss_bytes, 0);
  EXPECT_EQ(r.end, TrialEnd::kDied);
  close(go[1]);
  close(done[0]);
}

RankData LeaderWithTrials() {
  RankData d;
  d.tags.role = Role::kLeader;
  d.tags.host = "n1";
  d.pid = 10;
  d.wall_s = 10;
  TrialRecord a, b;
  a.name = "a";
  a.samples = 300;
  a.own_cpu_s = 5;
  a.leader_cpu_s = 2;
  b.name = "b";
  b.samples = 100;
  b.own_cpu_s = 4;
  b.leader_cpu_s = 1;
  b.end = TrialEnd::kDied;
  d.trials = {a, b};
  d.trial_totals.samples_published = 300;  // b joined late: 100 of a's 300 reached it too
  d.trial_totals.epochs_published = 3;
  d.trial_totals.unattributed_cpu_s = 0.25;
  d.rows.assign(col::kNum, 0.0);
  d.cpu_energy_source = "n/a: no /sys/class/powercap (test)";
  d.gpu_energy_source = "n/a: no GPU seen through NVML";
  return d;
}

TEST(TrialLedgerTest, SummaryCostsTheTrialsAndSaysWhatSharingSaved) {
  std::vector<RankData> ranks{LeaderWithTrials()};
  CostSummary c = SummarizeCost(ranks);
  EXPECT_EQ(c.trials, 2);
  EXPECT_EQ(c.trials_died, 1);
  EXPECT_DOUBLE_EQ(c.leader_cpu_s, 3.0);
  EXPECT_DOUBLE_EQ(c.own_cpu_s, 9.0);
  // 3 CPU-s for 300 published samples = 0.01 s per sample; alone: 400 samples x 0.01.
  EXPECT_DOUBLE_EQ(c.alone_cpu_s, 4.0);
  EXPECT_DOUBLE_EQ(c.saved_cpu_s, 1.0);
  EXPECT_DOUBLE_EQ(c.sharing, 400.0 / 300.0);
  EXPECT_TRUE(std::isnan(c.cpu_energy_j));
  EXPECT_NE(c.energy_note.find("no /sys/class/powercap"), std::string::npos);
  std::string text = FormatTrials(ranks, c);
  EXPECT_NE(text.find("sharing saved 1.00 CPU-s"), std::string::npos) << text;
  EXPECT_NE(text.find("died"), std::string::npos) << text;
  EXPECT_NE(text.find("energy: n/a (cpu packages: n/a: no /sys/class/powercap"), std::string::npos)
      << text;
  // The ledger survives the MPI gather and the HDF5/JSON attribute.
  std::vector<TrialRecord> back;
  LedgerTotals totals;
  ASSERT_TRUE(ParseTrialsJson(TrialsJson(ranks[0].trials, ranks[0].trial_totals), &back, &totals)
                  .ok());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].end, TrialEnd::kDied);
  EXPECT_EQ(back[0].samples, 300);
  EXPECT_DOUBLE_EQ(totals.unattributed_cpu_s, 0.25);
  EXPECT_TRUE(std::isnan(back[0].leave_s));
  auto round = DeserializeRankData(SerializeRankData(ranks[0]));
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_EQ(round->trials.size(), 2u);
  EXPECT_EQ(round->cpu_energy_source, ranks[0].cpu_energy_source);
}

TEST(TrialLedgerTest, EnergyPerEpochAndPerThousandSamplesComeFromTheNodesCounters) {
  RankData d = LeaderWithTrials();
  d.cpu_energy_present = true;
  d.cpu_energy_source = "RAPL powercap: package-0 (test)";
  d.rows[col::kCpuEnergy] = 600.0;  // one row: 600 J over the run
  std::vector<RankData> ranks{d};
  RankData same_host = d;  // a second process of the node reads the same counters
  same_host.wall_s = 5;
  same_host.rows[col::kCpuEnergy] = 300.0;
  same_host.trials.clear();
  ranks.push_back(same_host);
  CostSummary c = SummarizeCost(ranks);
  EXPECT_DOUBLE_EQ(c.cpu_energy_j, 600.0) << "the node once, from its longest reader";
  EXPECT_DOUBLE_EQ(c.joules_per_epoch, 200.0);
  EXPECT_DOUBLE_EQ(c.joules_per_1000_samples, 1500.0);  // 600 J / 400 samples delivered
}

}  // namespace
}  // namespace batchcast::telemetry
