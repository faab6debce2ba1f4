// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Variable-length tensors (docs/data-plane.md "Variable-length tensors"): a producer publishes
// token sequences of different lengths (values + row offsets per producer batch); every carve
// (exact batches across producer batches, drop_last, pad_last, shard, per-producer-batch
// carving with fill repeats) must hand each consumer every sample's rows whole, beside its id,
// exactly once per epoch. Each row holds a function of the sample id and the row number, so
// any row moved, lost, repeated or cut off is counted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "batchcast/consumer.h"
#include "core/random.h"
#include "producer/feed.h"
#include "producer/producer.h"
#include "tests/unit/node/carve_rounds.h"

namespace batchcast::node {
namespace {

std::string RaggedSocket() {
  static std::atomic<int> n{0};
  return "batchcast-test-" + std::to_string(getpid()) + "-rt-" + std::to_string(n++);
}

// Sample `id`: tok int32 [SeqLen(id)] = id * 100 + r, pair float32 [SeqLen(id) / 2, 2] = (id, r),
// emb float32 [2] (fixed) = (id, -id), label id % 7. Lengths 0..kLongest, zeros included.
constexpr int64_t kLongest = 9;
int64_t SeqLen(int64_t id) { return int64_t(Mix64(uint64_t(id) * 31 + 7) % (kLongest + 1)); }
int32_t SeqTok(int64_t id, int64_t r) { return int32_t(id * 100 + r); }

std::vector<producer::TensorSpec> RaggedSpecs(int64_t producer_batch) {
  const uint64_t p = uint64_t(producer_batch);
  return {{"tok", uint32_t(DType::kInt32), {shm::kVariableExtent}, p * kLongest * 4},
          {"emb", uint32_t(DType::kFloat32), {2}, 0},
          {"pair", uint32_t(DType::kFloat32), {shm::kVariableExtent, 2}, p * kLongest * 8}};
}

// Writes sample `id` at slot position i (positions come in order from 0).
void WriteSequences(const producer::ExternalSlot& s, int64_t i, int64_t id) {
  int64_t* tok_off = s.offsets[0];
  int64_t* pair_off = s.offsets[2];
  if (i == 0) tok_off[0] = pair_off[0] = 0;
  auto* tok = reinterpret_cast<int32_t*>(s.tensors[0]) + tok_off[i];
  for (int64_t r = 0; r < SeqLen(id); ++r) tok[r] = SeqTok(id, r);
  tok_off[i + 1] = tok_off[i] + SeqLen(id);
  auto* pair = reinterpret_cast<float*>(s.tensors[2]) + 2 * pair_off[i];
  for (int64_t r = 0; r < SeqLen(id) / 2; ++r) pair[2 * r] = float(id), pair[2 * r + 1] = float(r);
  pair_off[i + 1] = pair_off[i] + SeqLen(id) / 2;
  auto* emb = reinterpret_cast<float*>(s.tensors[1]) + 2 * i;
  emb[0] = float(id), emb[1] = -float(id);
  s.labels[i] = id % 7;
}

struct RaggedSeen {
  std::map<uint64_t, std::multiset<int64_t>> ids;  // epoch -> ids received
  int64_t bad = 0;                                  // rows or offsets not of their sample
  int64_t batches = 0, empty_samples = 0;
  Status status;
};

// Checks the offsets view of a variable-length tensor of `size` samples with `rows` rows.
int64_t BadOffsets(const TensorView& off, int64_t size, int64_t rows) {
  if (off.data == nullptr || off.dtype != DType::kInt64 || off.ndim != 1 ||
      off.shape[0] != size + 1)
    return 1;
  const auto* o = static_cast<const int64_t*>(off.data);
  int64_t bad = o[0] != 0 || o[size] != rows;
  for (int64_t i = 0; i < size; ++i) bad += o[i + 1] < o[i];
  return bad;
}

// Counts every row, offset and element that does not belong to its sample's id.
int64_t BadSequences(const Batch& b, int64_t* empty_samples) {
  const TensorView tok = b.tensor("tok"), pair = b.tensor("pair"), emb = b.tensor("emb");
  const TensorView tok_off = b.offsets("tok"), pair_off = b.offsets("pair");
  int64_t bad = 0;
  bad += tok.dtype != DType::kInt32 || tok.ndim != 1 || tok.data == nullptr;
  bad += pair.dtype != DType::kFloat32 || pair.ndim != 2 || pair.shape[1] != 2;
  bad += emb.ndim != 2 || emb.shape[0] != b.size() || b.offsets("emb").data != nullptr;
  bad += b.offsets("nope").data != nullptr || b.offsets("labels").data != nullptr;
  bad += BadOffsets(tok_off, b.size(), tok.shape[0]);
  bad += BadOffsets(pair_off, b.size(), pair.shape[0]);
  bad += tok.nbytes != size_t(tok.shape[0]) * 4 || pair.nbytes != size_t(pair.shape[0]) * 8;
  if (bad) return bad;
  const auto* to = static_cast<const int64_t*>(tok_off.data);
  const auto* po = static_cast<const int64_t*>(pair_off.data);
  const auto* tv = static_cast<const int32_t*>(tok.data);
  const auto* pv = static_cast<const float*>(pair.data);
  for (int64_t i = 0; i < b.size(); ++i) {
    const int64_t id = b.sample_ids()[i];
    bad += to[i + 1] - to[i] != SeqLen(id);
    bad += po[i + 1] - po[i] != SeqLen(id) / 2;
    if (bad) return bad;
    *empty_samples += SeqLen(id) == 0;
    for (int64_t r = 0; r < SeqLen(id); ++r) bad += tv[to[i] + r] != SeqTok(id, r);
    for (int64_t r = 0; r < SeqLen(id) / 2; ++r)
      bad += pv[2 * (po[i] + r)] != float(id) || pv[2 * (po[i] + r) + 1] != float(r);
    bad += static_cast<const float*>(emb.data)[2 * i] != float(id);
    bad += static_cast<const int64_t*>(b.labels().data)[i] != id % 7;
  }
  return bad;
}

void ConsumeRagged(Consumer* c, RaggedSeen* s) {
  s->status = ForEachBatch(c, [&](const Batch& b) {
    s->bad += BadSequences(b, &s->empty_samples);
    for (int64_t i = 0; i < b.size(); ++i) s->ids[b.info().epoch].insert(b.sample_ids()[i]);
    s->batches += 1;
  });
}

// Random epoch sizes, producer batches, consumer batch sizes, sequence lengths (empty ones
// included) and every carving: exact, drop_last, pad_last, shard, carve_offset, carve_shuffle
// (a carve into the fill repeats copies its rows).
TEST(RaggedTensorTest, EveryCarveHandsOutEverySequenceWholeExactlyOnce) {
  CarveRounds r;
  r.seed = 0x7a66ed;
  r.rounds = 14;
  r.max_samples = 140;
  r.max_batch = 12;
  r.modes = 6;
  r.socket_tag = "rt";
  std::atomic<int64_t> empty{0};  // (consumers count from their threads)
  r.feed = [&empty](CounterRng&, int64_t p) {
    RoundFeed f;
    f.feed.tensors = RaggedSpecs(p);
    f.write = WriteSequences;
    f.bad = [&empty](const Batch& b) {
      int64_t e = 0;
      const int64_t bad = BadSequences(b, &e);
      empty += e;
      return bad;
    };
    return f;
  };
  RunCarveRounds(r);
  EXPECT_GT(empty, 0);  // the rounds had empty sequences
}

// A consumer that joins after the first batches (the producer keeps copies of an epoch's
// first positions for late joiners: offsets and rows too) gets whole sequences, each epoch it
// receives exactly once.
TEST(RaggedTensorTest, ALateJoinerGetsWholeSequencesFromTheKeptCopies) {
  const int64_t n = 120, p = 8;
  const int epochs = 3;
  std::vector<std::vector<int64_t>> batches;
  for (int64_t at = 0; at < n; at += p) {
    batches.emplace_back();
    for (int64_t i = at; i < std::min(n, at + p); ++i) batches.back().push_back(i);
  }
  producer::ExternalFeedConfig feed;
  feed.tensors = RaggedSpecs(p);
  feed.producer_batch = p;
  feed.epoch_samples = n;
  feed.max_consumer_batch = 4;
  producer::ProducerConfig cfg;
  cfg.who = "producer";
  cfg.options.epochs = epochs;
  cfg.options.late_join_window = 0.5;  // half an epoch: the joiner below is within it
  cfg.expected_consumers = 1;
  cfg.socket_name = RaggedSocket();
  auto prod = producer::Producer::Create(
      cfg,
      producer::MakeExternalFeed(
          feed, std::make_unique<ListMaker>([&](uint64_t) { return batches; }, WriteSequences)),
      producer::MakeLocalDistribution());
  ASSERT_TRUE(prod.ok()) << prod.status().ToString();
  Options co;
  co.epochs = epochs;
  co.batch_size = 4;
  auto first = Consumer::Attach((*prod)->address(), co, 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::thread run([&] { EXPECT_TRUE((*prod)->Run().ok()); });
  Batch b;  // the first consumer takes a batch: the stream is under way
  ASSERT_TRUE((*first)->Next(&b).ok());
  int64_t empty = 0;
  EXPECT_EQ(BadSequences(b, &empty), 0);
  Options late = co;
  late.batch_size = 3;
  late.epochs = kEpochsUntilStreamEnds;
  auto joiner = Consumer::Attach((*prod)->address(), late, 1);
  ASSERT_TRUE(joiner.ok()) << joiner.status().ToString();
  RaggedSeen seen_first, seen_late;
  seen_first.ids[b.info().epoch].insert(b.sample_ids(), b.sample_ids() + b.size());
  b.Release();
  std::thread t1(ConsumeRagged, first.value().get(), &seen_first);
  ConsumeRagged(joiner.value().get(), &seen_late);
  t1.join();
  run.join();
  for (RaggedSeen* s : {&seen_first, &seen_late}) {
    ASSERT_TRUE(s->status.ok()) << s->status.ToString();
    EXPECT_EQ(s->bad, 0);
    EXPECT_FALSE(s->ids.empty());
    for (const auto& [epoch, got] : s->ids) {
      EXPECT_EQ(int64_t(got.size()), n) << "epoch " << epoch;
      EXPECT_EQ(int64_t(std::set<int64_t>(got.begin(), got.end()).size()), n);
    }
  }
  EXPECT_EQ(seen_first.ids.size(), size_t(epochs));
  // The ring holds the producer within 4 positions of the first consumer's, well inside the
  // window of 7: the joiner got epoch 0's first batches replayed from the kept copies.
  EXPECT_EQ(seen_late.ids.size(), size_t(epochs));
  EXPECT_GT((*prod)->stats().replayed_batches, 0);
}

TEST(RaggedTensorTest, BadVariableLengthSpecsAreRefusedNamingTheTensor) {
  auto refused = [](std::vector<producer::TensorSpec> specs, const std::string& want) {
    producer::ExternalFeedConfig feed;
    feed.tensors = std::move(specs);
    feed.producer_batch = 4;
    feed.max_consumer_batch = 2;
    const Status st = CreateFeedProducer(feed, "rt");
    EXPECT_NE(st.message().find(want), std::string::npos) << want << ": " << st.ToString();
  };
  const int64_t v = shm::kVariableExtent;
  refused({{"tok", 4, {v}, 0}}, "variable-length tensor 'tok' has no room for its values");
  refused({{"tok", 4, {2, v}, 64}},
          "tensor 'tok' has a per-sample extent -1 in dimension 1; every extent must be positive "
          "(only the first per-sample dimension may vary");
  refused({{"tok", 4, {v, v}, 64}}, "extent -1 in dimension 1");
  refused({{"tok", 4, {3}, 64}}, "tensor 'tok' has a fixed per-sample shape but a values budget");
  refused({{"tok", 4, {v, 0}, 64}}, "tensor 'tok' has a per-sample extent 0 in dimension 1");
}

// The slot layout of a variable-length tensor: its offsets (capacity + 1) and its values
// budget, each 64-aligned, inside the slot, and after every fixed tensor's rows.
TEST(RaggedTensorTest, SlotLayoutHoldsOffsetsAndTheValuesBudget) {
  pipeline::SampleLayout none;
  producer::SlotLayout l = producer::ComputeSlotLayout(10, 4, none);
  const std::vector<producer::TensorSpec> specs = {
      {"emb", uint32_t(DType::kFloat32), {3}, 0},
      {"tok", uint32_t(DType::kInt64), {shm::kVariableExtent}, 1000},
      {"pair", uint32_t(DType::kFloat16), {shm::kVariableExtent, 2}, 96}};
  ASSERT_TRUE(producer::AddTensors(specs, "test", &l).ok());
  ASSERT_EQ(l.tensors.size(), 3u);
  const producer::TensorSlot &emb = l.tensors[0], &tok = l.tensors[1], &pair = l.tensors[2];
  EXPECT_EQ(tok.spec.sample_bytes(), 8u);
  EXPECT_EQ(pair.spec.sample_bytes(), 4u);
  EXPECT_GE(tok.offset, emb.offset + l.capacity_samples * 12);
  EXPECT_EQ(tok.offset % 64, 0u);
  EXPECT_GE(tok.values_offset, tok.offset + (l.capacity_samples + 1) * 8);
  EXPECT_EQ(tok.values_offset % 64, 0u);
  EXPECT_GE(pair.offset, tok.values_offset + 1000);
  EXPECT_GE(pair.values_offset, pair.offset + (l.capacity_samples + 1) * 8);
  EXPECT_GE(l.slot_bytes, pair.values_offset + 96);
  EXPECT_EQ(l.slot_bytes % 4096, 0u);
}

}  // namespace
}  // namespace batchcast::node
