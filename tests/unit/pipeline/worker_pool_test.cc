// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The worker pool's queued loops (workers take the next loop's items while the previous
// loop's last item runs), its thread names, and the pipeline's StartBatch/FinishBatch:
// batches started together give the same bytes as batches run one at a time.
#include "pipeline/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "pipeline/pipeline.h"
#include "tests/unit/pipeline/memory_reader.h"
#include "tests/unit/pipeline/test_images.h"

namespace batchcast::pipeline {
namespace {

// The comm of every thread of this process.
std::multiset<std::string> ThreadNames() {
  std::multiset<std::string> names;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "comm");
    std::string name;
    std::getline(in, name);
    names.insert(name);
  }
  return names;
}

TEST(WorkerPoolTest, ThreadsAreNamedForTopAndProfilers) {
  WorkerPool pool(3, "bc-decode");
  // A loop that every thread joins proves they have all started (and named themselves).
  std::atomic<int> arrived{0};
  std::mutex mu;
  std::condition_variable cv;
  pool.Run(3, [&](int, int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    cv.wait(lock, [&] { return arrived.load() == 3; });
  });
  const auto names = ThreadNames();
  for (int w = 0; w < 3; ++w)
    EXPECT_EQ(names.count("bc-decode-" + std::to_string(w)), 1u) << "thread bc-decode-" << w;
}

TEST(WorkerPoolTest, IdleWorkersTakeTheNextLoopWhileTheLastItemOfOneRuns) {
  // Loop A's only item waits until an item of loop B has run. A pool that finishes a loop
  // before starting the next never runs B's items while A's is in progress: the wait
  // times out (a generous bound that only a deadlock reaches) and the test fails.
  WorkerPool pool(2);
  std::mutex mu;
  std::condition_variable cv;
  bool b_ran = false, a_saw_b = false;
  WorkerPool::Ticket a = pool.Submit(1, [&](int, int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    a_saw_b = cv.wait_for(lock, std::chrono::seconds(60), [&] { return b_ran; });
  });
  std::atomic<int64_t> b_items{0};
  WorkerPool::Ticket b = pool.Submit(5, [&](int, int64_t) {
    b_items.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    b_ran = true;
    cv.notify_all();
  });
  pool.Wait(b);
  pool.Wait(a);
  EXPECT_TRUE(a_saw_b);
  EXPECT_EQ(b_items.load(), 5);
}

TEST(WorkerPoolTest, EveryItemOfEveryQueuedLoopRunsOnce) {
  WorkerPool pool(3);
  constexpr int kLoops = 20;
  std::vector<std::vector<std::atomic<int>>> hits(kLoops);
  std::vector<WorkerPool::Ticket> tickets;
  for (int l = 0; l < kLoops; ++l) {
    const int64_t n = (l * 7) % 13;  // some loops are empty
    hits[l] = std::vector<std::atomic<int>>(n);
    tickets.push_back(pool.Submit(n, [&hits, l](int worker, int64_t i) {
      EXPECT_GE(worker, 0);
      EXPECT_LT(worker, 3);
      hits[l][i].fetch_add(1);
    }));
  }
  for (int l = kLoops - 1; l >= 0; --l) pool.Wait(tickets[l]);  // any order
  for (int l = 0; l < kLoops; ++l)
    for (auto& h : hits[l]) EXPECT_EQ(h.load(), 1) << "loop " << l;
}

TEST(PipelineOverlapTest, BatchesStartedTogetherEqualBatchesRunOneAtATime) {
  // Random crops, flips and a bad sample under on_bad_sample=skip (compaction): started
  // back to back, the batches share the workers, and every byte must still be the same.
  testing::Image photo = testing::Photo(200, 150);
  std::vector<std::vector<uint8_t>> images;
  for (int i = 0; i < 24; ++i)
    images.push_back(testing::EncodeJpeg(photo, 80 + i % 10, i % 2 ? TJSAMP_420 : TJSAMP_444));
  images[9] = {0xff, 0xd8, 0xff, 0x00};  // truncated: skipped
  Options o;
  o.threads = 3;
  o.image_size = 48;
  o.crop = "random";
  o.flip = true;
  o.normalize = true;
  o.on_bad_sample = "skip";
  auto serial = Pipeline::Create(o, testing::MemoryReader::Encoded(images));
  auto overlapped = Pipeline::Create(o, testing::MemoryReader::Encoded(images));
  ASSERT_TRUE(serial.ok() && overlapped.ok());
  const size_t sb = (*serial)->OutputLayout().bytes();
  constexpr int kBatches = 4, kPer = 6;
  std::vector<std::vector<int64_t>> samples(kBatches);
  for (int b = 0; b < kBatches; ++b)
    for (int i = 0; i < kPer; ++i) samples[b].push_back((b * kPer + i * 5) % 24);
  std::vector<std::vector<uint8_t>> want(kBatches, std::vector<uint8_t>(sb * kPer, 0xEE)),
      got = want;
  std::vector<std::vector<int64_t>> want_labels(kBatches, std::vector<int64_t>(kPer, -1)),
      got_labels = want_labels;
  std::vector<BatchResult> want_r(kBatches), got_r(kBatches);
  for (int b = 0; b < kBatches; ++b)
    ASSERT_TRUE((*serial)
                    ->RunBatch({uint64_t(b % 2), samples[b], 0, want[b].data(),
                                want_labels[b].data()}, &want_r[b])
                    .ok());
  for (int b = 0; b < kBatches; ++b) {
    std::vector<int64_t> temporary = samples[b];  // StartBatch copies the indices
    (*overlapped)->StartBatch({uint64_t(b % 2), temporary, 0, got[b].data(), got_labels[b].data()});
  }
  EXPECT_EQ((*overlapped)->batches_in_flight(), kBatches);
  for (int b = 0; b < kBatches; ++b) {
    ASSERT_TRUE((*overlapped)->FinishBatch(&got_r[b]).ok()) << "batch " << b;
    EXPECT_EQ(got[b], want[b]) << "batch " << b;
    EXPECT_EQ(got_labels[b], want_labels[b]) << "batch " << b;
    EXPECT_EQ(got_r[b].kept, want_r[b].kept) << "batch " << b;
    EXPECT_EQ(got_r[b].skipped, want_r[b].skipped) << "batch " << b;
  }
  EXPECT_FALSE((*overlapped)->FinishBatch(&got_r[0]).ok());  // nothing left started
}

}  // namespace
}  // namespace batchcast::pipeline
