// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The diagnosis rules (docs/telemetry.md) against constructed aggregates.
#include "telemetry/summary.h"

#include <gtest/gtest.h>

#include <cmath>

namespace batchcast::telemetry {
namespace {

constexpr int kDecode = static_cast<int>(Timer::kDecode);
constexpr int kRead = static_cast<int>(Timer::kRead);
constexpr int kPublish = static_cast<int>(Timer::kPublish);

RankStats Consumer(int rank, double wait_pct, double gpu = NAN) {
  RankStats r;
  r.rank = rank;
  r.role = Role::kConsumer;
  r.host = "n1";
  r.wall_s = 100;
  r.data_wait_pct = wait_pct;
  r.cpu_cores = 0.2;
  r.gpu_util_pct = gpu;
  r.cores_available = 2;
  return r;
}

// A leader on host n1 with `threads` workers busy for `decode_s` of decode and `read_s`.
RankStats Leader(double threads, double decode_s, double read_s, double cpu_cores) {
  RankStats r;
  r.rank = 0;
  r.role = Role::kLeader;
  r.host = "n1";
  r.wall_s = 100;
  r.worker_threads = threads;
  r.stage_s[kDecode] = decode_s;
  r.stage_s[kRead] = read_s;
  r.worker_util = threads > 0 ? (decode_s + read_s) / (threads * 100) : NAN;
  r.cpu_cores = cpu_cores;
  r.cores_available = 16;
  return r;
}

JobSummary Job(std::vector<RankStats> ranks) {
  JobSummary j;
  j.ranks = std::move(ranks);
  return j;
}

TEST(DiagnoseTest, InputBoundByDecodeNamesDecodeAndAdvises) {
  // Two workers busy 95% of the time, 180 of 190 s in decode: "decode used 1.8 of 2 cores".
  Diagnosis d = Diagnose(Job({Leader(2, 180, 10, 1.9), Consumer(1, 38), Consumer(2, 38)}));
  EXPECT_EQ(d.bottleneck, Bottleneck::kInput);
  EXPECT_EQ(d.stage, "decode");
  EXPECT_NE(d.headline.find("trainers waited 38% of step time for data"), std::string::npos)
      << d.headline;
  EXPECT_NE(d.headline.find("leader decode used 1.8 of 2 worker cores"), std::string::npos)
      << d.headline;
  EXPECT_NE(d.headline.find("progressive resizing"), std::string::npos);
  EXPECT_TRUE(d.notes.empty());
}

TEST(DiagnoseTest, InputBoundByReadAdvisesStorage) {
  Diagnosis d = Diagnose(Job({Leader(4, 40, 350, 1.0), Consumer(1, 60)}));
  EXPECT_EQ(d.bottleneck, Bottleneck::kInput);
  EXPECT_EQ(d.stage, "read");
  EXPECT_NE(d.headline.find("storage"), std::string::npos) << d.headline;
}

TEST(DiagnoseTest, InputBoundWithIdleWorkersSaysLeaderNotSaturated) {
  Diagnosis d = Diagnose(Job({Leader(8, 200, 10, 2.5), Consumer(1, 30)}));  // 26% busy
  EXPECT_EQ(d.bottleneck, Bottleneck::kInput);
  EXPECT_NE(d.headline.find("not saturated"), std::string::npos) << d.headline;
}

TEST(DiagnoseTest, InputBoundWithSaturatedNodeCpusSaysSo) {
  RankStats l = Leader(8, 200, 10, 1.0);
  l.cores_available = 2;
  RankStats c1 = Consumer(1, 30), c2 = Consumer(2, 30);
  c1.cpu_cores = c2.cpu_cores = 0.5;  // 1.0 + 0.5 + 0.5 = 2 of 2 cores on n1
  Diagnosis d = Diagnose(Job({l, c1, c2}));
  EXPECT_EQ(d.bottleneck, Bottleneck::kInput);
  EXPECT_EQ(d.stage, "cpu");
  EXPECT_NE(d.headline.find("CPUs are saturated (2.0 of 2 cores busy on n1"), std::string::npos)
      << d.headline;
}

TEST(DiagnoseTest, InputBoundByPublishPointsAtTheRing) {
  RankStats l = Leader(2, 10, 0, 0.5);
  l.stage_s[kPublish] = 80;
  Diagnosis d = Diagnose(Job({l, Consumer(1, 50)}));
  EXPECT_EQ(d.stage, "publish");
  EXPECT_NE(d.headline.find("most of its time in publish"), std::string::npos) << d.headline;
}

TEST(DiagnoseTest, ComputeBoundSaysInputIsNotTheBottleneck) {
  Diagnosis d = Diagnose(Job({Leader(2, 50, 5, 0.6), Consumer(1, 2), Consumer(2, 1)}));
  EXPECT_EQ(d.bottleneck, Bottleneck::kCompute);
  EXPECT_NE(d.headline.find("trainers waited 1.5% of step time for data: the input pipeline is "
                            "not the bottleneck"),
            std::string::npos)
      << d.headline;
  ASSERT_EQ(d.notes.size(), 1u);  // workers 27.5% busy: spare capacity
  EXPECT_NE(d.notes[0].find("spare input capacity"), std::string::npos);
}

TEST(DiagnoseTest, ComputeBoundWithIdleGpuNotesHostBoundStep) {
  Diagnosis d = Diagnose(Job({Consumer(1, 3, 20.0)}));
  EXPECT_EQ(d.bottleneck, Bottleneck::kCompute);
  ASSERT_FALSE(d.notes.empty());
  EXPECT_NE(d.notes[0].find("GPUs were busy only 20%"), std::string::npos);
}

TEST(DiagnoseTest, ThresholdIsInclusiveAtTenPercent) {
  EXPECT_EQ(Diagnose(Job({Consumer(1, 9.9)})).bottleneck, Bottleneck::kCompute);
  EXPECT_EQ(Diagnose(Job({Consumer(1, 10.0)})).bottleneck, Bottleneck::kInput);
  EXPECT_NE(Diagnose(Job({Consumer(1, 50)})).headline.find("no leader telemetry"),
            std::string::npos);
}

TEST(DiagnoseTest, ImbalancedConsumersAreNamed) {
  Diagnosis d = Diagnose(Job({Leader(2, 50, 5, 1), Consumer(1, 45), Consumer(2, 5)}));
  bool found = false;
  for (const auto& n : d.notes)
    found |= n.find("rank 1 waited 45% but rank 2 only 5%") != std::string::npos;
  EXPECT_TRUE(found);
}

TEST(DiagnoseTest, NoConsumersMeansNothingToDiagnose) {
  RankStats l = Leader(2, 50, 5, 1);
  l.samples_skipped = 3;
  l.samples_produced = 997;
  Diagnosis d = Diagnose(Job({l}));
  EXPECT_EQ(d.bottleneck, Bottleneck::kUnknown);
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("3 samples were skipped as bad (0.30% of produced)"),
            std::string::npos)
      << d.notes[0];
}

TEST(SummaryTest, RoleTableAggregatesAndPrints) {
  RankData leader, consumer;
  leader.tags = {"e", "w", "r", "n1", 0, 0, Role::kLeader};
  consumer.tags = {"e", "w", "r", "n1", 1, 1, Role::kConsumer};
  for (RankData* d : {&leader, &consumer}) {
    d->wall_s = 10;
    d->cpu_seconds = 5;
    d->peak_rss_bytes = 100 << 20;
    d->rows.assign(col::kNum, 0.0);
    d->rows[col::kGpuUtil] = NAN;
    d->rows[col::kGpuMem] = NAN;
  }
  leader.rows[col::Counter(Counter::kSamplesProduced)] = 1000;
  consumer.rows[col::Counter(Counter::kSamplesReceived)] = 500;
  consumer.rows[col::TimerNs(Timer::kDataWait)] = 1e9;
  consumer.rows[col::TimerNs(Timer::kStep)] = 3e9;
  consumer.rows[col::TimerCount(Timer::kStep)] = 100;
  JobSummary j = Summarize({consumer, leader});
  ASSERT_EQ(j.ranks.size(), 2u);
  EXPECT_EQ(j.ranks[0].rank, 0);  // sorted by rank
  ASSERT_EQ(j.roles.size(), 2u);
  EXPECT_EQ(j.roles[0].role, Role::kLeader);
  EXPECT_DOUBLE_EQ(j.roles[0].samples_per_s, 100);
  EXPECT_DOUBLE_EQ(j.roles[1].samples_per_s, 50);
  EXPECT_DOUBLE_EQ(j.roles[1].data_wait_pct, 25);
  EXPECT_DOUBLE_EQ(j.roles[1].step_ms, 30);
  EXPECT_TRUE(std::isnan(j.roles[0].data_wait_pct));
  EXPECT_DOUBLE_EQ(j.roles[1].cpu_cores, 0.5);
  std::string text = FormatSummary(j, Diagnose(j));
  EXPECT_NE(text.find("leader"), std::string::npos);
  EXPECT_NE(text.find("25.0"), std::string::npos) << text;
  EXPECT_NE(text.find("diagnosis (input-bound): trainers waited 25%"), std::string::npos) << text;
}

}  // namespace
}  // namespace batchcast::telemetry
