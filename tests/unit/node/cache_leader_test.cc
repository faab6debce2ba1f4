// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The decoded-sample cache (option `cache`) end to end: a leader over the producer core's
// pipeline source with RandomResizedCrop + flip and crop decoding, several consumers of
// different batch sizes, several epochs; every consumer's checksum of (epoch, sample,
// label, pixels) is the same with the cache on and off, and the leader's telemetry counts
// the hits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "batchcast/consumer.h"
#include "core/random.h"
#include "producer/producer.h"
#include "producer/batch_source.h"
#include "tests/unit/producer/photo_dataset.h"

namespace batchcast::node {
namespace {

// Per consumer: per (epoch, sample id) a checksum of its label and pixels.
using Digest = std::map<std::pair<uint64_t, int64_t>, uint64_t>;

void Digest1(Consumer* c, Digest* d, Status* status) {
  Batch batch;
  for (;;) {
    Status st = c->Next(&batch);
    if (!st.ok()) {
      if (st.code() != StatusCode::kEndOfStream) *status = st;
      return;
    }
    const size_t sb = batch.images().nbytes / static_cast<size_t>(batch.size());
    const auto* px = static_cast<const uint8_t*>(batch.images().data);
    const auto* labels = static_cast<const int64_t*>(batch.labels().data);
    for (int64_t i = 0; i < batch.size(); ++i) {
      uint64_t h = Mix64(uint64_t(labels[i]));
      for (size_t k = 0; k < sb; ++k) h = HashCombine(h, px[i * sb + k]);
      (*d)[{batch.info().epoch, batch.sample_ids()[i]}] = h;
    }
  }
}

std::vector<Digest> RunLeader(const Options& o, int consumers,
                              telemetry::Collector* collector = nullptr) {
  static std::atomic<int> n{0};
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = consumers;
  cfg.max_consumer_batch = 16;
  cfg.socket_name = "batchcast-test-" + std::to_string(getpid()) + "-cache-" + std::to_string(n++);
  cfg.job = "test";
  cfg.join_timeout_ms = 30000;
  cfg.collector = collector;
  auto source = producer::MakePipelineSource(o);
  EXPECT_TRUE(source.ok()) << source.status().ToString();
  if (!source.ok()) return {};
  auto leader = producer::Producer::Create(cfg, std::move(source).value());
  EXPECT_TRUE(leader.ok()) << leader.status().ToString();
  if (!leader.ok()) return {};
  Status leader_status;
  std::thread lt([&] { leader_status = (*leader)->Run(); });
  std::vector<std::unique_ptr<Consumer>> cs;
  std::vector<Digest> digests(consumers);
  std::vector<Status> statuses(consumers);
  for (int i = 0; i < consumers; ++i) {
    Options co = o;
    co.batch_size = 5 + 4 * i;
    auto c = Consumer::Attach((*leader)->address(), co, i);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) cs.push_back(std::move(c).value());
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cs.size(); ++i)
    threads.emplace_back(Digest1, cs[i].get(), &digests[i], &statuses[i]);
  for (auto& t : threads) t.join();
  lt.join();
  EXPECT_TRUE(leader_status.ok()) << leader_status.ToString();
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  return digests;
}

TEST(CacheLeaderTest, ConsumersGetTheSameBatchesWithAndWithoutTheCache) {
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   ("cache_leader_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "photos.h5").string();
  Status st = testing::WritePhotoDataset(path, 45);
  ASSERT_TRUE(st.ok()) << st.ToString();
  Options o;
  o.dataset = path;
  o.epochs = 3;
  o.seed = 7;
  o.threads = 2;
  o.producer_batch = 16;
  o.batch_size = 16;
  o.image_size = 40;
  o.crop = "random";
  o.flip = true;
  o.crop_decode = true;
  o.dct_scaling = false;  // bit-identical; with it, docs/pipeline.md gives the tolerance
  const auto off = RunLeader(o, 3);
  o.cache = 64 << 20;
  telemetry::Tags tags;
  tags.role = telemetry::Role::kLeader;
  auto collector = telemetry::Collector::Create(tags);
  ASSERT_TRUE(collector.ok()) << collector.status().ToString();
  const auto on = RunLeader(o, 3, collector->get());
  ASSERT_EQ(off.size(), 3u);
  ASSERT_EQ(on.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(off[i].size(), 3u * 45) << "consumer " << i;
    EXPECT_TRUE(on[i] == off[i]) << "consumer " << i;
  }
  EXPECT_TRUE(off[0] == off[1]);  // replicate: every consumer sees the whole stream
  // Telemetry: 45 samples in 3 epochs, each decoded once (the first epoch, or the start of
  // the second when it overlaps the first's end) and taken from the cache otherwise.
  telemetry::RankData d = (*collector)->Snapshot();
  using telemetry::Counter, telemetry::Gauge;
  namespace col = telemetry::col;
  const double hits = d.Total(col::Counter(Counter::kCacheHits));
  const double misses = d.Total(col::Counter(Counter::kCacheMisses));
  EXPECT_EQ(hits + misses, 3 * 45);
  EXPECT_GE(misses, 45);
  EXPECT_GE(hits, 45);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace batchcast::node
