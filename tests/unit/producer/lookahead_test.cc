// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// SlotWriter's look-ahead (producer/slot_writer.h): the next position's fill starts before
// the current one is published, is used when that position comes, and is dropped (the
// slot filled again) when the position gets other contents; consumers only ever see the
// contents of the request published at a position.
#include <gtest/gtest.h>
#include <unistd.h>

#include <deque>
#include <string>
#include <vector>

#include "core/errors.h"
#include "producer/slot_writer.h"
#include "transport/shm/ring_consumer.h"
#include "tests/unit/producer/rgb_layout.h"

namespace batchcast::producer {
namespace {

using testing::Rgb;

// Writes a started batch only when it is finished (as a pipeline whose workers are still
// busy would) and logs the calls: "S<first sample>" for Start, "F<first sample>" for Finish.
class DeferredSource : public BatchSource {
 public:
  int64_t num_samples() const override { return 1000; }
  pipeline::SampleLayout MaxLayout() const override { return Rgb(2); }
  pipeline::SampleLayout Layout(int) const override { return Rgb(2); }
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    auto* out = static_cast<uint8_t*>(req.images);
    const size_t sb = Rgb(2).bytes();
    for (size_t i = 0; i < req.samples.size(); ++i) {
      for (size_t b = 0; b < sb; ++b) out[i * sb + b] = static_cast<uint8_t>(req.samples[i]);
      req.labels[i] = req.samples[i] * 10;
    }
    result->written = static_cast<int64_t>(req.samples.size());
    result->kept.assign(req.samples.begin(), req.samples.end());
    return Status::Ok();
  }
  void Start(const pipeline::BatchRequest& req) override {
    started_.push_back({req, std::vector<int64_t>(req.samples.begin(), req.samples.end())});
    started_.back().first.samples = started_.back().second;
    log.push_back("S" + std::to_string(req.samples[0]));
  }
  Status Finish(pipeline::BatchResult* result) override {
    if (started_.empty()) return FailedPreconditionError("nothing started");
    log.push_back("F" + std::to_string(started_.front().second[0]));
    Status st = Fill(started_.front().first, result);
    started_.pop_front();
    return st;
  }
  bool overlaps() const override { return true; }
  std::vector<std::string> log;

 private:
  std::deque<std::pair<pipeline::BatchRequest, std::vector<int64_t>>> started_;
};

struct Request {
  std::vector<int64_t> samples;
  ProduceRequest r;
  Request(int64_t batch, std::vector<int64_t> s) : samples(std::move(s)) {
    r.samples = samples;
    r.sample = Rgb(2);
    r.contents.epoch = 0;
    r.contents.batch = batch;
    r.contents.batches_in_epoch = 10;
  }
};

class LookaheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = ComputeSlotLayout(4, 4, Rgb(2));
    shm::RingConfig rc;
    rc.num_slots = 3;
    rc.slot_bytes = layout_.slot_bytes;
    rc.max_consumer_batch = 4;
    rc.producer_batch = 4;
    rc.socket_name = "batchcast-test-lookahead-" + std::to_string(getpid());
    rc.job = "test";
    auto ring = shm::RingLeader::Create(rc);
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    ring_ = std::move(ring).value();
    shm::ConsumerConfig cc;
    cc.batch_size = 4;
    cc.buffer_depth = 1;
    auto c = shm::RingConsumer::Attach(rc.socket_name, cc);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    consumer_ = std::move(c).value();
    ASSERT_TRUE(ring_->WaitForJoined(1, 5000).ok());
    ASSERT_EQ(ring_->AdmitJoining(0), 1);
    ASSERT_TRUE(consumer_->WaitAdmitted(5000).ok());
    writer_ = std::make_unique<SlotWriter>(ring_.get(), layout_, "test", nullptr);
  }
  void TearDown() override {
    writer_.reset();
    if (ring_) ring_->End();
  }
  // The consumer's next batch: its first sample, every byte and label checked against it.
  int64_t Receive() {
    auto got = consumer_->Acquire(nullptr);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (!got.ok()) return -1;
    const int64_t* ids = layout_.ids(const_cast<uint8_t*>(got->data));
    const int64_t* labels = layout_.labels(const_cast<uint8_t*>(got->data));
    const size_t sb = Rgb(2).bytes();
    for (uint32_t i = 0; i < got->desc->num_samples; ++i) {
      EXPECT_EQ(labels[i], ids[i] * 10);
      for (size_t b = 0; b < sb; ++b)
        EXPECT_EQ(got->data[i * sb + b], static_cast<uint8_t>(ids[i])) << "sample " << i;
    }
    const int64_t first = ids[0];
    consumer_->Release(*got);
    return first;
  }

  SlotLayout layout_;
  std::unique_ptr<shm::RingLeader> ring_;
  std::unique_ptr<shm::RingConsumer> consumer_;
  std::unique_ptr<SlotWriter> writer_;
  DeferredSource source_;
};

TEST_F(LookaheadTest, NextBatchFillsBeforeThisOneIsPublishedAndIsUsedWhenItsTurnComes) {
  Request b0(0, {10, 11, 12, 13}), b1(1, {20, 21, 22, 23}), b2(2, {30, 31, 32, 33});
  ASSERT_TRUE(writer_->Produce(source_, b0.r, ~0ULL, {}, &b1.r).ok());
  // Batch 1 was started before batch 0 was finished (and so published).
  EXPECT_EQ(source_.log, (std::vector<std::string>{"S10", "S20", "F10"}));
  EXPECT_EQ(writer_->stats().lookahead_batches, 1);
  EXPECT_EQ(Receive(), 10);
  ASSERT_TRUE(writer_->Produce(source_, b1.r, ~0ULL, {}, &b2.r).ok());
  EXPECT_EQ(source_.log, (std::vector<std::string>{"S10", "S20", "F10", "S30", "F20"}))
      << "batch 1 must not be started twice";
  EXPECT_EQ(Receive(), 20);
  ASSERT_TRUE(writer_->Produce(source_, b2.r, ~0ULL, {}).ok());
  EXPECT_EQ(Receive(), 30);
  EXPECT_EQ(writer_->stats().lookahead_batches, 2);
  EXPECT_EQ(writer_->stats().lookahead_dropped, 0);
}

TEST_F(LookaheadTest, APositionWithOtherContentsDropsTheLookaheadAndRefillsItsSlot) {
  // A late joiner's replay takes the position the look-ahead was filled for.
  Request b0(0, {10, 11, 12, 13}), b1(1, {20, 21, 22, 23}), replay(0, {40, 41, 42, 43});
  ASSERT_TRUE(writer_->Produce(source_, b0.r, ~0ULL, {}, &b1.r).ok());
  EXPECT_EQ(Receive(), 10);
  ASSERT_TRUE(writer_->Produce(source_, replay.r, ~0ULL, {}).ok());
  EXPECT_EQ(writer_->stats().lookahead_dropped, 1);
  EXPECT_EQ(Receive(), 40) << "the replayed contents, not the dropped look-ahead";
  // A skipped position (published to nobody) drops it too.
  Request b2(2, {50, 51, 52, 53}), b3(3, {60, 61, 62, 63});
  ASSERT_TRUE(writer_->Produce(source_, b2.r, ~0ULL, {}, &b3.r).ok());
  EXPECT_EQ(Receive(), 50);
  ASSERT_TRUE(writer_->PublishEmpty(0, 3).ok());
  EXPECT_EQ(writer_->stats().lookahead_dropped, 2);
  ASSERT_TRUE(writer_->Produce(source_, b3.r, ~0ULL, {}).ok());
  EXPECT_EQ(Receive(), 60);
}

TEST_F(LookaheadTest, ALookaheadStillFillingWhenTheWriterGoesIsFinishedFirst) {
  Request b0(0, {10, 11, 12, 13}), b1(1, {20, 21, 22, 23});
  ASSERT_TRUE(writer_->Produce(source_, b0.r, ~0ULL, {}, &b1.r).ok());
  writer_.reset();
  EXPECT_EQ(source_.log.back(), "F20");
}

}  // namespace
}  // namespace batchcast::producer
