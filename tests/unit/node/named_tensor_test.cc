// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Batches of named tensors (docs/data-plane.md "Named tensors"): a producer publishes
// further tensors beside images and labels; every carve (exact batches across producer
// batches, drop_last, pad_last, shard, per-producer-batch carving with fill repeats) must
// keep the tensors of one sample together. Each tensor holds a function of the sample id, so
// any sample whose tensors moved apart from its id is counted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "batchcast/consumer.h"
#include "core/random.h"
#include "producer/feed.h"
#include "producer/producer.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::node {
namespace {

std::string NamedSocket() {
  static std::atomic<int> n{0};
  return "batchcast-test-" + std::to_string(getpid()) + "-nt-" + std::to_string(n++);
}

// The tensors of sample `id`: emb float32 [3], tok int32 [2, 2], mask bool (per-sample scalar),
// image uint8 [1, 2, 3], label id % 7.
float Emb(int64_t id, int k) { return float(id) * 0.5f + float(k) - 1.0f; }
int32_t Tok(int64_t id, int k) { return int32_t(id * 4 + k); }
bool Mask(int64_t id) { return id % 3 == 0; }
uint8_t Pixel(int64_t id, int k) { return uint8_t(id * 7 + k); }

std::vector<producer::TensorSpec> Specs() {
  return {{"emb", uint32_t(DType::kFloat32), {3}},
          {"tok", uint32_t(DType::kInt32), {2, 2}},
          {"mask", uint32_t(DType::kBool), {}}};
}

// Writes sample `id` at slot position i.
void WriteSample(const producer::ExternalSlot& s, bool images, int64_t i, int64_t id) {
  auto* emb = reinterpret_cast<float*>(s.tensors[0]) + i * 3;
  auto* tok = reinterpret_cast<int32_t*>(s.tensors[1]) + i * 4;
  for (int k = 0; k < 3; ++k) emb[k] = Emb(id, k);
  for (int k = 0; k < 4; ++k) tok[k] = Tok(id, k);
  s.tensors[2][i] = Mask(id) ? 1 : 0;
  if (images)
    for (int k = 0; k < 6; ++k) s.images[i * 6 + k] = Pixel(id, k);
  s.labels[i] = id % 7;
  s.ids[i] = id;
}

struct NamedSeen {
  std::map<uint64_t, std::multiset<int64_t>> ids;  // epoch -> ids received
  int64_t bad = 0;                                  // tensors not of their sample's id
  int64_t batches = 0;
  Status status;
};

// Counts every tensor element that does not belong to its sample's id.
int64_t BadElements(const Batch& b, bool images) {
  const TensorView emb = b.tensor("emb"), tok = b.tensor("tok"), mask = b.tensor("mask");
  const TensorView img = b.tensor("images"), ids = b.tensor("sample_ids");
  int64_t bad = 0;
  bad += emb.dtype != DType::kFloat32 || emb.ndim != 2 || emb.shape[1] != 3;
  bad += tok.dtype != DType::kInt32 || tok.ndim != 3 || tok.shape[1] != 2 || tok.shape[2] != 2;
  bad += mask.dtype != DType::kBool || mask.ndim != 1 || mask.shape[0] != b.size();
  bad += ids.data != b.sample_ids();
  bad += b.tensor("nope").data != nullptr;
  if (bad) return bad;
  for (int64_t i = 0; i < b.size(); ++i) {
    const int64_t id = b.sample_ids()[i];
    for (int k = 0; k < 3; ++k) bad += static_cast<const float*>(emb.data)[i * 3 + k] != Emb(id, k);
    for (int k = 0; k < 4; ++k) bad += static_cast<const int32_t*>(tok.data)[i * 4 + k] != Tok(id, k);
    bad += static_cast<const uint8_t*>(mask.data)[i] != (Mask(id) ? 1 : 0);
    bad += static_cast<const int64_t*>(b.labels().data)[i] != id % 7;
    for (int k = 0; images && k < 6; ++k) bad += static_cast<const uint8_t*>(img.data)[i * 6 + k] != Pixel(id, k);
  }
  if (!images) bad += img.nbytes != 0;
  return bad;
}

void ConsumeNamed(Consumer* c, bool images, NamedSeen* s) {
  s->status = ForEachBatch(c, [&](const Batch& b) {
    EXPECT_EQ(b.num_tensors(), 3);
    EXPECT_STREQ(b.tensor_name(1), "tok");
    EXPECT_EQ(b.tensor_name(3), nullptr);
    s->bad += BadElements(b, images);
    for (int64_t i = 0; i < b.size(); ++i) s->ids[b.info().epoch].insert(b.sample_ids()[i]);
    s->batches += 1;
  });
}

// Random epoch sizes, producer batches, consumer batch sizes and carvings; the producer
// commits partial batches at every epoch's end and a random order of ids each epoch.
TEST(NamedTensorTest, EveryCarveKeepsTheTensorsOfASampleTogether) {
  const uint64_t seed = 0x2020;
  for (int round = 0; round < 12; ++round) {
    CounterRng rng(HashCombine(seed, uint64_t(round), 1));
    const int64_t n = 1 + int64_t(rng.Below(150));
    const uint32_t max_b = 1 + uint32_t(rng.Below(16));
    const int64_t p = int64_t(max_b) * (1 + int64_t(rng.Below(3))) + int64_t(rng.Below(max_b));
    const bool images = rng.Below(2) == 0;
    const int epochs = 2, consumers = 1 + int(rng.Below(3));
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " round " << round << ": n " << n
                                    << " producer batch " << p << " max_b " << max_b
                                    << " images " << images);
    // The iterable: every epoch a random order of ids, in batches of p (the last partial).
    const auto epoch_batches = RandomEpochBatches(rng, n, p, epochs);
    producer::ExternalFeedConfig feed;
    if (images) feed.layout.channels = 1, feed.layout.height = 2, feed.layout.width = 3;
    feed.tensors = Specs();
    feed.producer_batch = p;
    feed.epoch_samples = n;
    feed.max_consumer_batch = max_b;
    producer::ProducerConfig cfg;
    cfg.who = "producer";
    cfg.options.epochs = epochs;
    cfg.expected_consumers = consumers;
    cfg.socket_name = NamedSocket();
    auto prod = producer::Producer::Create(
        cfg,
        producer::MakeExternalFeed(
            feed, std::make_unique<ListMaker>(
                      [&](uint64_t e) { return epoch_batches[e]; },
                      [images](const producer::ExternalSlot& slot, int64_t pos, int64_t id) {
                        WriteSample(slot, images, pos, id);
                      })),
        producer::MakeLocalDistribution());
    ASSERT_TRUE(prod.ok()) << prod.status().ToString();
    producer::Producer& pr = **prod;
    std::vector<std::unique_ptr<Consumer>> cs;
    std::vector<Options> cos;
    for (int i = 0; i < consumers; ++i) {
      Options co;
      co.epochs = epochs;
      co.batch_size = i == 0 ? int(max_b) : 1 + int(rng.Below(max_b));
      const int mode = RandomCarve(rng, 5, &co);  // exact .. carve_offset
      SCOPED_TRACE(::testing::Message() << "consumer " << i << " b " << co.batch_size << " mode "
                                      << mode);
      auto c = Consumer::Attach(pr.address(), co, i);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      cs.push_back(std::move(c).value());
      cos.push_back(co);
    }
    std::vector<NamedSeen> seen(static_cast<size_t>(consumers));
    std::vector<std::thread> threads;
    for (int i = 0; i < consumers; ++i)
      threads.emplace_back(ConsumeNamed, cs[i].get(), images, &seen[i]);
    EXPECT_TRUE(pr.Run().ok());
    for (auto& t : threads) t.join();
    for (int i = 0; i < consumers; ++i) {
      const Options& co = cos[i];
      SCOPED_TRACE(::testing::Message() << "consumer " << i << " b " << co.batch_size);
      ASSERT_TRUE(seen[i].status.ok()) << seen[i].status.ToString();
      EXPECT_EQ(seen[i].bad, 0);
      EXPECT_GT(seen[i].batches, 0);
      for (int e = 0; e < epochs; ++e) {  // every sample of the epoch, unless dropped or sharded
        const std::multiset<int64_t>& got = seen[i].ids[uint64_t(e)];
        const std::set<int64_t> distinct(got.begin(), got.end());
        for (int64_t id : distinct) EXPECT_TRUE(id >= 1000 * e && id < 1000 * e + n) << id;
        if (!co.drop_last && co.mode != "shard") {
          EXPECT_EQ(int64_t(distinct.size()), n);
        }
      }
    }
  }
}

TEST(NamedTensorTest, BadTensorSpecsAreRefusedNamingTheTensor) {
  auto refused = [](std::vector<producer::TensorSpec> specs, const std::string& want) {
    producer::ExternalFeedConfig feed;
    feed.layout.channels = feed.layout.height = feed.layout.width = 1;
    feed.tensors = std::move(specs);
    feed.producer_batch = 4;
    feed.max_consumer_batch = 2;
    producer::ProducerConfig cfg;
    cfg.who = "producer";
    cfg.socket_name = NamedSocket();
    auto p = producer::Producer::Create(
        cfg, producer::MakeExternalFeed(feed, std::make_unique<ListMaker>(nullptr, nullptr)),
        producer::MakeLocalDistribution());
    ASSERT_FALSE(p.ok()) << want;
    EXPECT_NE(p.status().message().find(want), std::string::npos) << p.status().message();
  };
  refused({{"labels", 2, {1}}}, "tensor name 'labels' is reserved");
  refused({{"a", 1, {2}}, {"a", 1, {2}}}, "tensor 'a' is given twice");
  refused({{"a", 77, {2}}}, "tensor 'a' has an unknown dtype code 77; use one of uint8, float32");
  refused({{"a", 1, {2, 2, 2, 2}}}, "tensor 'a' has 4 dimensions per sample; at most 3");
  refused({{"a", 1, {0}}}, "tensor 'a' has a per-sample extent 0");
  refused({{std::string(40, 'x'), 1, {1}}}, "must have 1 to 31 characters");
  std::vector<producer::TensorSpec> many;
  for (int i = 0; i < 9; ++i) many.push_back({"t" + std::to_string(i), 1, {1}});
  refused(many, "tensor 't8' is one too many: a slot holds at most 8");
}

}  // namespace
}  // namespace batchcast::node
