// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The one slot sizing function every producer uses (producer/slot_layout.h).
#include "producer/slot_layout.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/unit/producer/rgb_layout.h"

namespace batchcast::producer {
namespace {

using testing::Rgb;

TEST(SlotLayoutTest, HoldsTheProducerBatchAndTheLargestTail) {
  const SlotLayout l = ComputeSlotLayout(64, 32, Rgb(8));
  EXPECT_EQ(l.capacity_samples, 64u + 2 * 32 - 1);  // P + the largest fill tail (2b - 2) + 1
  EXPECT_EQ(l.images_bytes, l.capacity_samples * 192);
  EXPECT_EQ(l.labels_offset % 64, 0u);
  EXPECT_GE(l.labels_offset, l.images_bytes);
  EXPECT_EQ(l.ids_offset % 64, 0u);
  EXPECT_GE(l.ids_offset, l.labels_offset + l.capacity_samples * sizeof(int64_t));
  EXPECT_EQ(l.slot_bytes % 4096, 0u);
  EXPECT_GE(l.slot_bytes, l.ids_offset + l.capacity_samples * sizeof(int64_t));
  std::vector<uint8_t> memory(l.slot_bytes);  // a whole slot: the offsets point into it
  uint8_t* slot = memory.data();
  EXPECT_EQ(reinterpret_cast<uint8_t*>(l.labels(slot)), slot + l.labels_offset);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(l.ids(slot)), slot + l.ids_offset);
}

// Images only a model stage reads (keep_input=false) keep room for the distinct samples of
// the largest producer batch, not for the fill-repeat tail; labels and ids keep every position.
TEST(SlotLayoutTest, ImagesWithoutTheirTailHoldTheDistinctSamplesOnly) {
  SlotBucket small;
  small.producer_batch = 256;
  small.max_consumer_batch = 128;
  small.sample = Rgb(4);  // 48 bytes
  const SlotBucket buckets[] = {small};
  for (const bool resizing : {false, true}) {
    const auto b = resizing ? std::span<const SlotBucket>(buckets) : std::span<const SlotBucket>();
    const SlotLayout full = ComputeSlotLayout(64, 32, Rgb(8), b);
    SlotLayout l = full;
    DropImagesTail(&l);
    EXPECT_EQ(l.images_bytes, resizing ? 256u * 48 : 64u * 192) << resizing;
    EXPECT_EQ(l.capacity_samples, full.capacity_samples);
    EXPECT_GE(l.labels_offset, l.images_bytes);
    EXPECT_LT(l.labels_offset, full.labels_offset);
    EXPECT_EQ(l.ids_offset - l.labels_offset, full.ids_offset - full.labels_offset);
    EXPECT_LT(l.slot_bytes, full.slot_bytes);
    EXPECT_GE(l.slot_bytes, l.ids_offset + l.capacity_samples * sizeof(int64_t));
  }
}

TEST(SlotLayoutTest, ResizeBucketsTakeTheLargestCountAndImageBytes) {
  // A small-image bucket holds more (smaller) samples, a larger consumer batch and fewer
  // image bytes: the slot is sized for the largest of each.
  SlotBucket small;
  small.producer_batch = 256;
  small.max_consumer_batch = 128;
  small.sample = Rgb(4);  // 48 bytes
  const SlotBucket buckets[] = {small};
  const SlotLayout l = ComputeSlotLayout(64, 32, Rgb(8), buckets);
  EXPECT_EQ(l.capacity_samples, 256u + 2 * 128 - 1);
  EXPECT_EQ(l.images_bytes, std::max<uint64_t>((64 + 63) * 192, (256 + 255) * 48));
  const SlotLayout plain = ComputeSlotLayout(64, 32, Rgb(8));
  EXPECT_GT(l.slot_bytes, plain.slot_bytes);
}

TEST(SlotLayoutTest, BatchSizesDefaultAndRefuseASmallProducerBatch) {
  Options o;
  o.batch_size = 24;
  auto s = ResolveBatchSizes(o, 0, "leader");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->max_consumer_batch, 24u);
  EXPECT_EQ(s->producer_batch, 48);
  o.producer_batch = 16;
  auto bad = ResolveBatchSizes(o, 32, "service");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("service: producer_batch 16 is smaller than the largest "
                                        "consumer batch 32"), std::string::npos)
      << bad.status().message();
}

TEST(SlotLayoutTest, RingConfigCarriesTheStreamShape) {
  Options o;
  o.buffer_depth = 3;
  EXPECT_EQ(RingSlots(o), 5u);
  o.ring_slots = 9;
  EXPECT_EQ(RingSlots(o), 9u);
  const SlotLayout l = ComputeSlotLayout(40, 10, Rgb(8));
  shm::RingConfig rc = RingConfigFor(l, 6, 10, 40, 333, 3);
  EXPECT_EQ(rc.num_slots, 6u);
  EXPECT_EQ(rc.slot_bytes, l.slot_bytes);
  EXPECT_EQ(rc.max_consumer_batch, 10u);
  EXPECT_EQ(rc.producer_batch, 40u);
  EXPECT_EQ(rc.epoch_samples, 333u);
  EXPECT_EQ(rc.stream_epochs, 3u);
  EXPECT_EQ(RingConfigFor(l, 6, 10, 40, 333, 0).stream_epochs, 0u);  // unbounded
  EXPECT_EQ(RingConfigFor(l, 6, 10, 40, 333, -1).stream_epochs, 0u);
}

}  // namespace
}  // namespace batchcast::producer
