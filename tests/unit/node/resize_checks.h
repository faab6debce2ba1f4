// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Checks of a progressive-resizing stream as a consumer sees it (docs/progressive-resizing.md),
// shared by every front door's test that runs a schedule: the leader built directly
// (tests/unit/node/resize_leader_test.cc) and `batchcast serve` (tests/service). A consumer
// records every batch (stream epoch, image size, scaled batch size, LR factor, repeats, ids
// and a digest of each sample's pixels); ExpectFollowsSchedule then holds it against the
// schedule rebuilt independently from the same inputs: every sample the schedule trains in an
// epoch exactly once (plus the reported fill repeats), at its size, in batches of the
// consumer's scaled size with its LR factor, and BatchesPerEpoch exact before and during
// each epoch.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "batchcast/consumer.h"
#include "schedule/resize_schedule.h"
#include "schedule/resize_spec.h"

namespace batchcast::testing {

// One batch as a consumer saw it.
struct SeenBatch {
  uint64_t epoch;
  int image_size;
  int64_t size;
  float lr_factor;
  int32_t repeats;
  std::vector<int64_t> ids;
  std::vector<uint64_t> digests;  // FNV-1a of each sample's image bytes
};

struct ResizeSeen {
  std::vector<SeenBatch> batches;
  std::vector<int64_t> announced;        // BatchesPerEpoch(e) asked before the first batch
  std::map<uint64_t, int64_t> current;   // BatchesPerEpoch() asked during epoch e
  int64_t bad_pixels = 0, bad_shapes = 0, bad_labels = 0;
  ConsumerStats stats;
  Status status;
};

inline uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// What a source promises of one sample: its pixels at `size` and its label (false: wrong).
using SampleCheck = std::function<bool(int64_t id, int size, const uint8_t* pixels,
                                       size_t bytes, int64_t label, bool* label_ok)>;

// Runs after each batch is recorded (a training step, or a decision to leave): false stops
// reading there, the batch released (the caller then detaches the consumer).
using AfterBatch = std::function<bool(const BatchInfo& info)>;

// Reads `c` to the end of its stream, asking BatchesPerEpoch(e) for every stream epoch
// e in [0, stream_epochs] first. `check` (may be empty) judges each sample; `after` (may be
// empty) may end the reading early.
inline void ConsumeResized(Consumer* c, int stream_epochs, int channels,
                           const SampleCheck& check, ResizeSeen* seen,
                           const AfterBatch& after = {}) {
  for (int e = 0; e <= stream_epochs; ++e)
    seen->announced.push_back(c->BatchesPerEpoch(uint64_t(e)));
  Batch batch;
  Status st;
  while ((st = c->Next(&batch)).ok()) {
    const BatchInfo& info = batch.info();
    if (info.index == 0) seen->current[info.epoch] = c->BatchesPerEpoch();
    const TensorView& img = batch.images();
    const int s = info.image_size;
    const size_t bytes = size_t(channels) * s * s;
    if (img.shape[0] != batch.size() || img.shape[1] != channels || img.shape[2] != s ||
        img.shape[3] != s || img.nbytes != size_t(batch.size()) * bytes)
      ++seen->bad_shapes;
    SeenBatch sb{info.epoch, s, batch.size(), info.lr_factor, info.repeats, {}, {}};
    const auto* px = static_cast<const uint8_t*>(img.data);
    const auto* labels = static_cast<const int64_t*>(batch.labels().data);
    for (int64_t i = 0; i < batch.size(); ++i) {
      const int64_t id = batch.sample_ids()[i];
      const uint8_t* sample = px + size_t(i) * bytes;
      sb.ids.push_back(id);
      sb.digests.push_back(Fnv1a(sample, bytes));
      bool label_ok = true;
      if (check && !check(id, s, sample, bytes, labels[i], &label_ok)) ++seen->bad_pixels;
      if (!label_ok) ++seen->bad_labels;
    }
    seen->batches.push_back(std::move(sb));
    if (after && !after(info)) {
      batch.Release();
      st = Status(StatusCode::kEndOfStream, "left early");
      break;
    }
  }
  if (st.code() != StatusCode::kEndOfStream) seen->status = st;
  seen->stats = c->stats();
}

// The schedule a leader of these options executes over n samples, rebuilt independently.
inline std::unique_ptr<schedule::ResizeSchedule> ExpectedSchedule(const Options& o, int64_t n) {
  auto spec = schedule::ParseResizeSpec(o.resize);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return nullptr;
  schedule::ResizeScheduleParams p;
  p.spec = *spec;
  p.seed = o.seed;
  p.num_samples = n;
  p.total_epochs = o.epochs;
  p.base_batch_size = o.producer_batch;
  auto s = schedule::ResizeSchedule::Create(p);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline int BucketOf(const schedule::ResizeSchedule& s, int image_size) {
  for (int b = 0; b < s.num_buckets(); ++b)
    if (s.bucket_sizes()[b] == image_size) return b;
  return -1;
}

// Every sample trained in stream epochs [first_epoch, first_epoch + epochs) exactly once
// (plus the reported fill repeats), at the size the schedule gives it, with the consumer's
// scaled batch size and LR factor; no other epoch; BatchesPerEpoch exact.
inline void ExpectFollowsSchedule(const ResizeSeen& seen, const schedule::ResizeSchedule& s,
                                  int base_b, int epochs, int first_epoch = 0) {
  ASSERT_TRUE(seen.status.ok()) << seen.status.ToString();
  EXPECT_EQ(seen.bad_pixels, 0);
  EXPECT_EQ(seen.bad_shapes, 0);
  EXPECT_EQ(seen.bad_labels, 0);
  std::map<uint64_t, std::map<int64_t, int>> counts;
  std::map<uint64_t, std::map<int64_t, int>> size_of;
  std::map<uint64_t, int64_t> repeats;
  for (const SeenBatch& b : seen.batches) {
    const int bucket = BucketOf(s, b.image_size);
    ASSERT_GE(bucket, 0) << "image size " << b.image_size << " is not a bucket";
    EXPECT_EQ(b.size, s.ScaledBatchSize(base_b, bucket)) << "at size " << b.image_size;
    EXPECT_NEAR(b.lr_factor, s.LrFactor(base_b, bucket), 1e-5) << "at size " << b.image_size;
    repeats[b.epoch] += b.repeats;
    for (int64_t id : b.ids) {
      counts[b.epoch][id] += 1;
      auto [it, fresh] = size_of[b.epoch].emplace(id, b.image_size);
      EXPECT_EQ(it->second, b.image_size) << "sample " << id << " seen at two sizes";
    }
  }
  ASSERT_EQ(static_cast<int>(counts.size()), epochs);
  ASSERT_EQ(counts.begin()->first, uint64_t(first_epoch)) << "the first stream epoch seen";
  for (const auto& [epoch, c] : counts) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    auto plan = s.PlanEpoch(static_cast<int>(epoch));
    ASSERT_TRUE(plan.ok());
    std::map<int64_t, int> expected_size;
    for (int b = 0; b < s.num_buckets(); ++b)
      for (int64_t id : plan->buckets[b].samples) expected_size[id] = s.bucket_sizes()[b];
    ASSERT_EQ(c.size(), expected_size.size()) << "samples trained this epoch";
    int64_t extra = 0;
    for (const auto& [id, k] : c) {
      ASSERT_TRUE(expected_size.count(id)) << "sample " << id << " is not in this epoch";
      EXPECT_EQ(size_of[epoch][id], expected_size[id]) << "sample " << id;
      extra += k - 1;
    }
    EXPECT_EQ(extra, repeats[epoch]) << "repeats must be exactly the reported fill repeats";
  }
  EXPECT_EQ(seen.stats.epochs_completed, epochs);
  // BatchesPerEpoch is exact per stream epoch, before the stream starts and while it runs.
  std::map<uint64_t, int64_t> batches_in;
  for (const SeenBatch& b : seen.batches) batches_in[b.epoch] += 1;
  for (const auto& [e, count] : batches_in) {
    ASSERT_LT(e, seen.announced.size());
    EXPECT_EQ(seen.announced[e], count) << "BatchesPerEpoch(" << e << ")";
    EXPECT_EQ(seen.current.at(e), count) << "BatchesPerEpoch() during epoch " << e;
  }
  EXPECT_EQ(seen.announced.back(), 0) << "no batches past the stream's last epoch";
}

}  // namespace batchcast::testing
