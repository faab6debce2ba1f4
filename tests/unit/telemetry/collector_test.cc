// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Collector counters against ground truth: exact counts, constructed runs with known
// data-wait fractions, concurrent recording while the sampler runs, bounded tables.
#include "telemetry/collector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "telemetry/summary.h"

namespace batchcast::telemetry {
namespace {

std::unique_ptr<Collector> MakeCollector(Role role, CollectorOptions o = {}) {
  Tags tags;
  tags.experiment = "exp";
  tags.workload = "wl";
  tags.run = "run1";
  tags.role = role;
  o.gpu = false;
  auto c = Collector::Create(tags, o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// A leader "decodes" each batch for decode_ms into a queue of depth 2; the consumer waits
// for the next batch (data-wait) and "trains" for step_ms (step). In steady state the
// consumer waits max(0, decode - step) per batch. The run is simulated in virtual time and
// recorded through the collector's API with those times, so the numbers are exact on any
// machine (real sleeps overran under load and made this a timing test).
RankStats ConstructedRun(int batches, int decode_ms, int step_ms, int samples_per_batch) {
  auto c = MakeCollector(Role::kBoth);
  c->SetGauge(Gauge::kWorkerThreads, 1);
  const int64_t decode = decode_ms * 1000000LL, step = step_ms * 1000000LL;
  std::vector<int64_t> pushed(batches), popped(batches);
  int64_t leader_free = 0, consumer_ready = 0;
  for (int b = 0; b < batches; ++b) {
    const int64_t d0 = leader_free, d1 = d0 + decode;
    c->AddTime(Timer::kDecode, decode);
    c->Span(SpanKind::kProduce, b, d0, d1);
    // The queue holds 2: batch b is pushed once batch b-2 was taken.
    pushed[b] = std::max(d1, b >= 2 ? popped[b - 2] : int64_t{0});
    leader_free = pushed[b];
    c->Add(Counter::kBatchesProduced, 1);
    c->Add(Counter::kSamplesProduced, samples_per_batch);
    const int64_t t0 = consumer_ready;
    popped[b] = std::max(t0, pushed[b]);
    c->AddTime(Timer::kDataWait, popped[b] - t0);
    c->Span(SpanKind::kWait, b, t0, popped[b]);
    c->Add(Counter::kBatchesReceived, 1);
    c->Add(Counter::kSamplesReceived, samples_per_batch);
    c->AddTime(Timer::kStep, step);
    c->Span(SpanKind::kStep, b, popped[b], popped[b] + step);
    consumer_ready = popped[b] + step;
  }
  const double virtual_wall_s = 1e-9 * static_cast<double>(consumer_ready);
  FinishReport report;
  Sinks none;
  none.print_summary = false;
  EXPECT_TRUE(c->Finish(none, &report).ok());
  EXPECT_EQ(report.ranks.size(), 1u);
  const RankData& d = report.ranks[0];
  EXPECT_EQ(d.Total(col::Counter(Counter::kBatchesReceived)), batches);
  EXPECT_EQ(d.Total(col::Counter(Counter::kSamplesReceived)), batches * samples_per_batch);
  EXPECT_EQ(d.Total(col::TimerCount(Timer::kStep)), batches);
  EXPECT_EQ(d.Total(col::TimerCount(Timer::kDecode)), batches);
  EXPECT_EQ(d.spans.size(), 3u * batches);
  EXPECT_EQ(d.spans_dropped, 0);
  RankData virtual_time = d;
  virtual_time.wall_s = virtual_wall_s;  // the run's length in its own (virtual) time
  return ComputeRankStats(virtual_time);
}

TEST(CollectorTest, InputBoundConstructReadsThirtyPercentWait) {
  // decode 10 ms, step 7 ms: the consumer waits 3 of every 10 ms.
  RankStats s = ConstructedRun(40, 10, 7, 32);
  // The first batch waits a whole decode (10 ms), each later one decode - step (3 ms).
  EXPECT_NEAR(s.data_wait_pct, 100.0 * (10 + 39 * 3) / (10 + 39 * 3 + 40 * 7), 1e-9);
  EXPECT_DOUBLE_EQ(s.step_ms, 7.0);
  EXPECT_NEAR(s.worker_util, 400.0 / 407.0, 1e-9);  // one worker decoding all but the last step
  JobSummary j;
  j.ranks = {s};
  Diagnosis d = Diagnose(j);
  EXPECT_EQ(d.bottleneck, Bottleneck::kInput) << d.headline;
}

TEST(CollectorTest, ComputeBoundConstructReadsNoWait) {
  // decode 2 ms, step 6 ms: the queue is always full, only the first batch is waited for.
  RankStats s = ConstructedRun(40, 2, 6, 16);
  EXPECT_NEAR(s.data_wait_pct, 100.0 * 2 / (2 + 40 * 6), 1e-9);
  JobSummary j;
  j.ranks = {s};
  EXPECT_EQ(Diagnose(j).bottleneck, Bottleneck::kCompute);
}

TEST(CollectorTest, FourThreadsRecordExactlyWhileSamplerRuns) {
  CollectorOptions o;
  o.interval_ms = 10;  // the sampler snapshots continuously during the test
  o.max_spans = 1000;  // rounded up to 1024: most spans are dropped
  auto c = MakeCollector(Role::kConsumer, o);
  constexpr int kThreads = 4, kEvents = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEvents; ++i) {
        c->Add(Counter::kSamplesReceived, 2);
        c->AddTime(Timer::kStep, 5);
        c->SetGauge(Gauge::kBufferOccupancy, t);
        c->Span(SpanKind::kStep, static_cast<uint64_t>(i), i, i + 1);
      }
    });
  for (auto& t : threads) t.join();
  RankData d = c->Snapshot();
  EXPECT_EQ(d.Total(col::Counter(Counter::kSamplesReceived)), 2.0 * kThreads * kEvents);
  EXPECT_EQ(d.Total(col::TimerNs(Timer::kStep)), 5.0 * kThreads * kEvents);
  EXPECT_EQ(d.Total(col::TimerCount(Timer::kStep)), 1.0 * kThreads * kEvents);
  EXPECT_LE(d.spans.size(), 1024u);
  EXPECT_GT(d.spans.size(), 0u);
  EXPECT_EQ(static_cast<int64_t>(d.spans.size()) + d.spans_dropped, kThreads * kEvents);
  for (const auto& s : d.spans) EXPECT_EQ(s.end_ns, s.begin_ns + 1);  // never torn
  // Cumulative columns never decrease from row to row.
  for (int64_t r = 1; r < d.num_rows(); ++r)
    EXPECT_GE(d.At(r, col::Counter(Counter::kSamplesReceived)),
              d.At(r - 1, col::Counter(Counter::kSamplesReceived)));
}

TEST(CollectorTest, SeriesStaysBoundedAndTotalsStayExact) {
  CollectorOptions o;
  o.interval_ms = 60000;  // only Snapshot() adds rows
  o.max_rows = 16;
  auto c = MakeCollector(Role::kConsumer, o);
  RankData d;
  for (int i = 1; i <= 100; ++i) {
    c->Add(Counter::kBatchesReceived, 1);
    d = c->Snapshot();
    ASSERT_LE(d.num_rows(), 16);
  }
  EXPECT_EQ(d.Total(col::Counter(Counter::kBatchesReceived)), 100);
  EXPECT_GT(d.interval_s, 60.0);  // the stride doubled at least once
  for (int64_t r = 1; r < d.num_rows(); ++r)
    EXPECT_GT(d.At(r, col::kTime), d.At(r - 1, col::kTime));
}

TEST(CollectorTest, GaugeRowHoldsIntervalMean) {
  CollectorOptions o;
  o.interval_ms = 60000;
  auto c = MakeCollector(Role::kLeader, o);
  c->SetGauge(Gauge::kRingOccupancy, 1);
  c->SetGauge(Gauge::kRingOccupancy, 3);
  RankData d = c->Snapshot();
  EXPECT_DOUBLE_EQ(d.At(d.num_rows() - 1, col::Gauge(Gauge::kRingOccupancy)), 2.0);
  d = c->Snapshot();  // nothing set since: the last value
  EXPECT_DOUBLE_EQ(d.At(d.num_rows() - 1, col::Gauge(Gauge::kRingOccupancy)), 3.0);
}

TEST(CollectorTest, ProcessMetricsArePresentAndGpuIsAbsentNotZero) {
  auto c = MakeCollector(Role::kConsumer);
  RankData d = c->Snapshot();
  ASSERT_GE(d.num_rows(), 1);
  EXPECT_GT(d.At(0, col::kRssBytes), 1 << 20);  // a process has at least 1 MiB resident
  EXPECT_GE(d.At(0, col::kCpuCores), 0.0);
  EXPECT_FALSE(d.gpu_present);  // MakeCollector disables NVML
  EXPECT_TRUE(std::isnan(d.At(0, col::kGpuUtil)));
  EXPECT_TRUE(std::isnan(d.At(0, col::kGpuMem)));
  EXPECT_GE(d.cores_available, 1);
}

TEST(CollectorTest, NullCollectorHelpersDoNothing) {
  Collector* none = nullptr;
  Add(none, Counter::kBatchesReceived, 1);
  AddTime(none, Timer::kStep, 1);
  SetGauge(none, Gauge::kBufferOccupancy, 1);
  Span(none, SpanKind::kStep, 1, 0, 1);
  { ScopedTimer t(none, Timer::kDecode, SpanKind::kProduce, 1); }
  SUCCEED();
}

TEST(CollectorTest, FinishTwiceIsAnError) {
  auto c = MakeCollector(Role::kConsumer);
  Sinks none;
  none.print_summary = false;
  ASSERT_TRUE(c->Finish(none).ok());
  Status again = c->Finish(none);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
}

TEST(CollectorTest, AnnotationsTravelWithTheRankAndAreBounded) {
  auto c = MakeCollector(Role::kLeader);
  c->Annotate("progressive resizing plan");
  c->Annotate("epoch 0 (ramp): 100 of 100 samples\n");
  RankData d = c->Snapshot();
  EXPECT_EQ(d.annotations, "progressive resizing plan\nepoch 0 (ramp): 100 of 100 samples\n");
  Result<RankData> back = DeserializeRankData(SerializeRankData(d));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->annotations, d.annotations);
  std::string text = FormatAnnotations({*back});
  EXPECT_NE(text.find("-- rank 0 (leader)"), std::string::npos) << text;
  EXPECT_NE(text.find("epoch 0 (ramp)"), std::string::npos) << text;
  EXPECT_EQ(FormatAnnotations({RankData()}), "") << "no annotations, no section";
  const std::string line(1000, 'x');
  for (size_t i = 0; i < Collector::kMaxAnnotationBytes / line.size() + 10; ++i) c->Annotate(line);
  RankData full = c->Snapshot();
  EXPECT_LE(full.annotations.size(), Collector::kMaxAnnotationBytes + 100);
  EXPECT_NE(full.annotations.find("more annotation lines dropped"), std::string::npos);
}

TEST(CollectorTest, SerializeRoundTrips) {
  auto c = MakeCollector(Role::kLeader);
  c->Add(Counter::kBytesShm, 12345);
  c->Span(SpanKind::kPublish, 7, 100, 200);
  RankData d = c->Snapshot();
  Result<RankData> back = DeserializeRankData(SerializeRankData(d));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tags.run, "run1");
  EXPECT_EQ(back->tags.role, Role::kLeader);
  EXPECT_EQ(back->Total(col::Counter(Counter::kBytesShm)), 12345);
  ASSERT_EQ(back->spans.size(), 1u);
  EXPECT_EQ(back->spans[0].seq, 7u);
  EXPECT_TRUE(std::isnan(back->At(0, col::kGpuUtil)));
  EXPECT_FALSE(DeserializeRankData("not cbor").ok());
}

TEST(CollectorTest, NamedSeriesKeepEveryPointInOrderAndRoundTrip) {
  auto c = MakeCollector(Role::kConsumer);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(c->Record("model/lenet/loss", 2.0 - 0.1 * i).ok());
    if (i % 2 == 0) {
      ASSERT_TRUE(c->Record("model/mlp/accuracy", 0.1 * i).ok());
    }
  }
  RankData d = c->Snapshot();
  ASSERT_EQ(d.named.size(), 2u);
  EXPECT_EQ(d.named[0].name, "model/lenet/loss");  // sorted by name
  const NamedSeries* loss = d.Named("model/lenet/loss");
  ASSERT_NE(loss, nullptr);
  ASSERT_EQ(loss->value.size(), 10u);
  EXPECT_DOUBLE_EQ(loss->value[3], 1.7);
  for (size_t i = 1; i < loss->time_s.size(); ++i) EXPECT_GE(loss->time_s[i], loss->time_s[i - 1]);
  EXPECT_LE(loss->time_s.back(), d.At(d.num_rows() - 1, col::kTime));  // the rows' clock
  EXPECT_EQ(d.Named("model/mlp/accuracy")->value.size(), 5u);
  Result<RankData> back = DeserializeRankData(SerializeRankData(d));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->named.size(), 2u);
  EXPECT_EQ(back->named[0].value, loss->value);
  EXPECT_EQ(back->named[0].time_s, loss->time_s);
  std::string text = FormatNamedSeries({*back});
  EXPECT_NE(text.find("model/lenet/loss 10 points, 2 -> 1.1"), std::string::npos) << text;
  EXPECT_EQ(FormatNamedSeries({RankData()}), "");
}

TEST(CollectorTest, NamedSeriesRefuseBadNamesAndPrefixClashes) {
  auto c = MakeCollector(Role::kConsumer);
  ASSERT_TRUE(c->Record("model/a/loss", 1).ok());
  for (const char* bad : {"", "model//loss", "/model", "model/", "a b", "model/../x", "x:y"}) {
    Status st = c->Record(bad, 1);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("series name"), std::string::npos) << st.ToString();
  }
  Status up = c->Record("model/a", 1);  // would be the group holding model/a/loss
  EXPECT_EQ(up.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(up.message().find("'model/a' and 'model/a/loss' clash"), std::string::npos)
      << up.ToString();
  Status down = c->Record("model/a/loss/x", 1);
  EXPECT_NE(down.message().find("'model/a/loss/x' and 'model/a/loss' clash"), std::string::npos)
      << down.ToString();
  EXPECT_TRUE(c->Record("model/ab", 1).ok()) << "a common string prefix is not a path prefix";
  EXPECT_EQ(c->Snapshot().named.size(), 2u);
}

TEST(CollectorTest, NamedSeriesStayBoundedAndCoverTheRun) {
  CollectorOptions o;
  o.max_rows = 16;
  auto c = MakeCollector(Role::kConsumer, o);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(c->Record("step", i).ok());
  RankData d = c->Snapshot();
  const NamedSeries& s = d.named.at(0);
  EXPECT_LE(s.value.size(), 16u);
  EXPECT_GE(s.value.size(), 8u);
  EXPECT_EQ(s.stride, 8);  // thinned when full at points 16, 32 and 64
  for (size_t i = 1; i < s.value.size(); ++i) EXPECT_GT(s.value[i], s.value[i - 1]);
  EXPECT_GE(s.value.back(), 100 - s.stride) << "the series reaches the end of the run";
  EXPECT_LE(s.value.front(), 2 * s.stride) << "and still starts near its beginning";
}

}  // namespace
}  // namespace batchcast::telemetry
