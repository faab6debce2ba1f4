// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The LibTorch view (batchcast/torch.h) over a real leader, ring and consumer: tensors
// alias slot memory, hold the slot while any of them lives, and give it back when the
// last one dies.
#include "batchcast/torch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "batchcast/consumer.h"
#include "producer/producer.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::node {
namespace {

std::string UniqueSocket() {
  static std::atomic<int> n{0};
  return "batchcast-test-" + std::to_string(getpid()) + "-torch-" + std::to_string(n++);
}

// Float32 HWC samples: pixel value = sample index + byte position / 1000.
class FloatHwcSource : public producer::BatchSource {
 public:
  explicit FloatHwcSource(int64_t n) : n_(n) {
    layout_.channels = 3;
    layout_.height = layout_.width = 4;
    layout_.dtype = pipeline::DType::kFloat32;
    layout_.layout = pipeline::Layout::kHWC;
  }
  int64_t num_samples() const override { return n_; }
  pipeline::SampleLayout MaxLayout() const override { return layout_; }
  pipeline::SampleLayout Layout(int) const override { return layout_; }
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    auto* out = static_cast<float*>(req.images);
    const size_t per = layout_.bytes() / sizeof(float);
    for (size_t i = 0; i < req.samples.size(); ++i) {
      for (size_t k = 0; k < per; ++k)
        out[i * per + k] = static_cast<float>(req.samples[i]) + static_cast<float>(k) / 1000.0f;
      req.labels[i] = req.samples[i] % 10;
    }
    result->written = static_cast<int64_t>(req.samples.size());
    result->kept.assign(req.samples.begin(), req.samples.end());
    return Status::Ok();
  }

 private:
  int64_t n_;
  pipeline::SampleLayout layout_;
};

// A leader running on its own thread with one expected consumer.
class TorchViewTest : public ::testing::Test {
 protected:
  void StartLeader(const Options& o, int64_t n, std::unique_ptr<producer::BatchSource> source = nullptr) {
    options_ = o;
    producer::ProducerConfig cfg;
    cfg.options = o;
    cfg.expected_consumers = 1;
    cfg.max_consumer_batch = static_cast<uint32_t>(o.batch_size);
    cfg.socket_name = UniqueSocket();
    cfg.job = "test";
    cfg.join_timeout_ms = 30000;
    if (!source) source = std::make_unique<SyntheticSource>(n, 28, 1);
    auto l = producer::Producer::Create(cfg, std::move(source));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    leader_ = std::move(l).value();
    thread_ = std::thread([this] { leader_status_ = leader_->Run(); });
    auto c = Consumer::Attach(leader_->address(), o, 0);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    consumer_ = std::move(c).value();
  }
  void TearDown() override {
    if (consumer_) {
      Batch rest;
      while (consumer_->Next(&rest).ok()) rest.Release();
    }
    if (thread_.joinable()) thread_.join();
    EXPECT_TRUE(leader_status_.ok()) << leader_status_.ToString();
  }
  struct SlotPending {
    const std::atomic<uint64_t>& pending;
  };
  SlotPending SlotOf(const Batch& b) {
    const shm::SegmentView& v = leader_->ring().view();
    return {v.pending(shm::PositionSlot(v.position(b.info().producer_seq).load()))};
  }
  static Options BaseOptions(int epochs, int batch) {
    Options o;
    o.epochs = epochs;
    o.seed = 7;
    o.batch_size = batch;
    o.producer_batch = batch;  // one consumer batch per slot (carving: see below)
    o.buffer_depth = 2;
    o.ring_slots = 4;
    o.heartbeat_ms = 5000;
    return o;
  }

  Options options_;
  std::unique_ptr<producer::Producer> leader_;
  std::thread thread_;
  Status leader_status_;
  std::unique_ptr<Consumer> consumer_;
};

TEST_F(TorchViewTest, TensorsAliasSlotMemory) {
  StartLeader(BaseOptions(1, 8), 64);
  Batch b;
  ASSERT_TRUE(consumer_->Next(&b).ok());
  auto t = ToTorch(b);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->images.data_ptr(), b.images().data) << "images were copied";
  EXPECT_EQ(t->labels.data_ptr(), b.labels().data) << "labels were copied";
  EXPECT_EQ(t->sample_ids.data_ptr(), static_cast<const void*>(b.sample_ids()));
  EXPECT_EQ(t->images.scalar_type(), torch::kUInt8);
  EXPECT_EQ(t->labels.scalar_type(), torch::kInt64);
  EXPECT_EQ(t->images.sizes(), (std::vector<int64_t>{8, 1, 28, 28}));
  EXPECT_EQ(t->labels.sizes(), (std::vector<int64_t>{8}));
  EXPECT_TRUE(t->images.is_contiguous());
  EXPECT_FALSE(t->info.channels_last);
  // The tensor reads what the leader wrote, through torch indexing.
  for (int64_t i = 0; i < b.size(); ++i) {
    int64_t id = t->sample_ids[i].item<int64_t>();
    EXPECT_EQ(id, b.sample_ids()[i]);
    EXPECT_EQ(t->labels[i].item<int64_t>(), id % 10);
    EXPECT_EQ(t->images[i][0][0][5].item<uint8_t>(), SyntheticPixel(id, 5));
  }
}

TEST_F(TorchViewTest, FloatChannelsLastIsViewedAsNhwcAndPermutedWithoutCopy) {
  Options o = BaseOptions(1, 4);
  StartLeader(o, 32, std::make_unique<FloatHwcSource>(32));
  Batch b;
  ASSERT_TRUE(consumer_->Next(&b).ok());
  auto t = ToTorch(b);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->info.channels_last);
  EXPECT_EQ(t->images.scalar_type(), torch::kFloat32);
  EXPECT_EQ(t->images.sizes(), (std::vector<int64_t>{4, 4, 4, 3}));
  torch::Tensor nchw = AsNCHW(*t);
  EXPECT_EQ(nchw.sizes(), (std::vector<int64_t>{4, 3, 4, 4}));
  EXPECT_EQ(nchw.data_ptr(), b.images().data);
  // [n][c][y][x] of the permuted view is byte (y*W + x)*C + c of sample n.
  int64_t id = b.sample_ids()[1];
  EXPECT_FLOAT_EQ(nchw[1][2][3][1].item<float>(), float(id) + float((3 * 4 + 1) * 3 + 2) / 1000.0f);
}

// Slot checks use a stream of exactly ring_slots producer batches: a released slot is never
// refilled (and so never pending again) before the check reads it.
constexpr int64_t kOneRingOfSamples = 4 * 8;

TEST_F(TorchViewTest, SlotIsHeldWhileAnyTensorLivesAndReleasedWhenTheyDie) {
  StartLeader(BaseOptions(1, 8), kOneRingOfSamples);
  Batch b;
  ASSERT_TRUE(consumer_->Next(&b).ok());
  const SlotPending slot = SlotOf(b);
  std::weak_ptr<void> ref = b.KeepAlive();
  const int64_t id3 = b.sample_ids()[3];
  torch::Tensor labels, row, ids;
  {
    auto t = ToTorch(b);
    ASSERT_TRUE(t.ok());
    labels = t->labels;
    row = t->images[3];  // a view of a view shares the storage
    ids = t->sample_ids;
  }  // the TorchBatch is gone
  b.Release();
  EXPECT_FALSE(b.valid());
  EXPECT_NE(slot.pending.load(), 0u) << "slot released while tensors reference it";
  labels = torch::Tensor();
  ids = torch::Tensor();
  EXPECT_NE(slot.pending.load(), 0u) << "slot released while a slice of the images lives";
  EXPECT_EQ(row[0][0][5].item<uint8_t>(), SyntheticPixel(id3, 5)) << "the slice reads the slot";
  row = torch::Tensor();
  EXPECT_TRUE(ref.expired()) << "a tensor deleter kept its reference";
  EXPECT_EQ(slot.pending.load(), 0u) << "slot not released after the last tensor died";
}

TEST_F(TorchViewTest, ConvertedCopiesDoNotHoldTheSlot) {
  StartLeader(BaseOptions(1, 8), kOneRingOfSamples);
  Batch b;
  ASSERT_TRUE(consumer_->Next(&b).ok());
  const SlotPending slot = SlotOf(b);
  torch::Tensor x;
  {
    auto t = ToTorch(b);
    ASSERT_TRUE(t.ok());
    x = t->images.to(torch::kFloat32).div_(255);  // out of place: a new, owned tensor
  }
  b.Release();
  EXPECT_EQ(slot.pending.load(), 0u);
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{8, 1, 28, 28}));
}

TEST_F(TorchViewTest, ReleasedBatchIsRefusedWithAClearMessage) {
  StartLeader(BaseOptions(1, 8), 64);
  Batch b;
  auto t = ToTorch(b);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("released"), std::string::npos) << t.status().message();
}

// With producer batches of 2b a slot carries two consumer batches: the slot is given back
// only when the tensors of both are gone.
TEST_F(TorchViewTest, CarvedBatchesOfOneSlotHoldItUntilTheLastTensorOfEitherDies) {
  Options o = BaseOptions(1, 8);
  o.producer_batch = 16;
  StartLeader(o, 64);
  Batch b1, b2;
  ASSERT_TRUE(consumer_->Next(&b1).ok());
  ASSERT_TRUE(consumer_->Next(&b2).ok());
  ASSERT_EQ(b1.info().producer_seq, b2.info().producer_seq) << "expected two carves of one slot";
  const SlotPending slot = SlotOf(b1);
  auto t1 = ToTorch(b1);
  auto t2 = ToTorch(b2);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_NE(t1->images.data_ptr(), t2->images.data_ptr());
  b1.Release();
  b2.Release();
  t1 = Result<TorchBatch>(TorchBatch());
  EXPECT_NE(slot.pending.load(), 0u) << "slot released while the second carve's tensors live";
  t2 = Result<TorchBatch>(TorchBatch());
  EXPECT_EQ(slot.pending.load(), 0u) << "slot not released after both carves' tensors died";
}

int64_t ResidentKiB() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      in >> kib;
      return kib;
    }
    in.ignore(1 << 12, '\n');
  }
  return -1;
}

// A training-like loop over many epochs: the previous step's tensors are still alive when
// the next batch is taken (depth 2). If a deleter failed to give its reference back, the
// consumer would exceed buffer_depth and Next() would fail; if tensors leaked, resident
// memory would grow with the number of batches.
TEST_F(TorchViewTest, RepeatedEpochsDoNotGrowMemory) {
  const int epochs = 120, batch = 16;
  const int64_t n = 256;
  Options o = BaseOptions(epochs, batch);
  o.producer_batch = 2 * batch;  // carved slots too
  StartLeader(o, n);
  TorchBatch previous;
  int64_t batches = 0, rss_after_warmup = 0;
  double checksum = 0;
  Batch b;
  Status st;
  while ((st = consumer_->Next(&b)).ok()) {
    std::weak_ptr<void> ref = b.KeepAlive();
    auto t = ToTorch(b);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    b.Release();
    checksum += t->images.to(torch::kFloat32).mean().item<double>();
    previous = std::move(t).value();
    ++batches;
    if (batches == 10 * (n / batch)) rss_after_warmup = ResidentKiB();
    if (batches % 97 == 0) {  // every tensor's deleter gives its reference back
      previous = TorchBatch();
      EXPECT_TRUE(ref.expired());
    }
  }
  ASSERT_EQ(st.code(), StatusCode::kEndOfStream) << st.ToString();
  previous = TorchBatch();
  EXPECT_EQ(batches, int64_t(epochs) * (n / batch));
  EXPECT_EQ(consumer_->stats().epochs_completed, epochs);
  EXPECT_GT(checksum, 0);
  const shm::SegmentView& view = leader_->ring().view();
  for (uint32_t s = 0; s < view.geo.max_slots; ++s)
    EXPECT_EQ(view.pending(s).load(), 0u) << "slot " << s << " still held";
  // 110 epochs after the warm-up: a leak of even 1 KiB per batch would show as > 1.7 MiB.
  int64_t growth = ResidentKiB() - rss_after_warmup;
  EXPECT_LT(growth, 1024) << "resident memory grew by " << growth << " KiB over 110 epochs";
}

// A variable-length tensor (docs/data-plane.md "Variable-length tensors") through ToTorch:
// its values alias the slot (or a joined batch's rows), its offsets are int64 [size + 1] from
// 0, and every sample's rows are its own (token id * 10 + row, id % 4 rows, some none).
TEST(TorchRaggedTest, VariableLengthTensorsGiveValuesAndOffsets) {
  producer::ExternalFeedConfig feed;
  feed.tensors = {{"tok", uint32_t(DType::kInt32), {shm::kVariableExtent}, 3 * 4 * 4}};
  feed.producer_batch = 3;
  feed.epoch_samples = 9;
  feed.max_consumer_batch = 2;
  producer::ProducerConfig cfg;
  cfg.who = "producer";
  cfg.socket_name = UniqueSocket();
  auto write = [](const producer::ExternalSlot& s, int64_t i, int64_t id) {
    if (i == 0) s.offsets[0][0] = 0;
    auto* rows = reinterpret_cast<int32_t*>(s.tensors[0]) + s.offsets[0][i];
    for (int64_t r = 0; r < id % 4; ++r) rows[r] = int32_t(id * 10 + r);
    s.offsets[0][i + 1] = s.offsets[0][i] + id % 4;
    s.labels[i] = id;
  };
  auto batches = [](uint64_t) {
    return std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}};
  };
  auto p = producer::Producer::Create(
      cfg, producer::MakeExternalFeed(feed, std::make_unique<ListMaker>(batches, write)),
      producer::MakeLocalDistribution());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Options o;
  o.batch_size = 2;  // batches that span two producer batches join their rows
  auto c = Consumer::Attach((*p)->address(), o, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::thread run([&] { EXPECT_TRUE((*p)->Run().ok()); });
  Batch b;
  int64_t samples = 0;
  while ((*c)->Next(&b).ok()) {
    auto t = ToTorch(b);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const torch::Tensor values = t->tensors.at("tok"), offsets = t->offsets.at("tok");
    if (values.numel() > 0) {  // in place (an empty tensor has no data pointer)
      EXPECT_EQ(values.data_ptr(), b.tensor("tok").data);
    }
    EXPECT_EQ(offsets.scalar_type(), torch::kInt64);
    ASSERT_EQ(offsets.size(0), b.size() + 1);
    EXPECT_EQ(offsets[0].item<int64_t>(), 0);
    EXPECT_EQ(t->offsets.count("labels"), 0u);
    for (int64_t i = 0; i < b.size(); ++i) {
      const int64_t id = b.sample_ids()[i];
      const torch::Tensor seq =
          values.slice(0, offsets[i].item<int64_t>(), offsets[i + 1].item<int64_t>());
      EXPECT_TRUE(torch::equal(seq, torch::arange(id % 4, torch::kInt32) + int32_t(id * 10)))
          << "sample " << id;
      samples += 1;
    }
  }
  run.join();
  EXPECT_EQ(samples, 9);
}

}  // namespace
}  // namespace batchcast::node
