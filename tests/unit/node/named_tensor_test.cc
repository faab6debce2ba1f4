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
#include "tests/unit/node/carve_rounds.h"

namespace batchcast::node {
namespace {

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

// Random epoch sizes, producer batches, consumer batch sizes and carvings (exact, drop_last,
// pad_last, shard, carve_offset); with or without images.
TEST(NamedTensorTest, EveryCarveKeepsTheTensorsOfASampleTogether) {
  CarveRounds r;
  r.seed = 0x2020;
  r.socket_tag = "nt";
  r.feed = [](CounterRng& rng, int64_t) {
    const bool images = rng.Below(2) == 0;
    RoundFeed f;
    if (images) f.feed.layout.channels = 1, f.feed.layout.height = 2, f.feed.layout.width = 3;
    f.feed.tensors = Specs();
    f.write = [images](const producer::ExternalSlot& slot, int64_t pos, int64_t id) {
      WriteSample(slot, images, pos, id);
    };
    f.bad = [images](const Batch& b) {
      EXPECT_EQ(b.num_tensors(), 3);
      EXPECT_STREQ(b.tensor_name(1), "tok");
      EXPECT_EQ(b.tensor_name(3), nullptr);
      return BadElements(b, images);
    };
    return f;
  };
  RunCarveRounds(r);
}

TEST(NamedTensorTest, BadTensorSpecsAreRefusedNamingTheTensor) {
  auto refused = [](std::vector<producer::TensorSpec> specs, const std::string& want) {
    producer::ExternalFeedConfig feed;
    feed.layout.channels = feed.layout.height = feed.layout.width = 1;
    feed.tensors = std::move(specs);
    feed.producer_batch = 4;
    feed.max_consumer_batch = 2;
    const Status st = CreateFeedProducer(feed, "nt");
    EXPECT_NE(st.message().find(want), std::string::npos) << want << ": " << st.ToString();
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
