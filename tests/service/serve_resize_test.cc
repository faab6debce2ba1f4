// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Progressive resizing through `batchcast serve` (docs/progressive-resizing.md, "Front doors"):
// a real `batchcast serve` process runs a schedule over real JPEGs and PNGs, two trials of
// different batch sizes read the whole run and a third joins mid-schedule. Every trial gets
// every sample of each stream epoch exactly once at the size the schedule gives it, in its
// own scaled batches, and every sample's pixels equal those of a leader of the same options
// built directly in this process (the MPI Runtime's path); the late joiner follows the
// stream's epoch it is admitted into.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "batchcast/consumer.h"
#include "node/front_door.h"
#include "producer/producer.h"
#include "tests/service/service_test_util.h"
#include "tests/unit/node/resize_checks.h"
#include "tests/unit/producer/photo_dataset.h"

namespace batchcast {
namespace {

using testing::ConsumeResized;
using testing::ExpectFollowsSchedule;
using testing::ResizeSeen;

constexpr int kSamples = 200;
constexpr int kEpochs = 4;
constexpr int kChannels = 3;

bool PhotoLabel(int64_t id, int, const uint8_t*, size_t, int64_t label, bool* label_ok) {
  *label_ok = label == id % 2;
  return true;
}

// (stream epoch, sample) -> digest of its pixels, from every batch seen.
std::map<std::pair<uint64_t, int64_t>, uint64_t> Digests(const ResizeSeen& seen) {
  std::map<std::pair<uint64_t, int64_t>, uint64_t> out;
  for (const auto& b : seen.batches)
    for (size_t i = 0; i < b.ids.size(); ++i) out[{b.epoch, b.ids[i]}] = b.digests[i];
  return out;
}

Options TrialOptions(int batch, int epochs) {
  Options o;
  o.batch_size = batch;
  o.epochs = epochs;
  o.heartbeat_ms = 5000;
  return o;
}

TEST(ServeResizeTest, ServeRunsTheScheduleForEveryTrialAndALateJoinerFollowsTheStreamEpoch) {
  const std::string dir = ::testing::TempDir() + "/bc_serve_resize_" + std::to_string(getpid());
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  const std::string h5 = dir + "/photos.h5";
  ASSERT_TRUE(testing::WritePhotoDataset(h5, kSamples).ok());
  // Epoch 0 all at 8 px, epoch 1 half at 12, epoch 2 at 8/12/16, epoch 3 (final) at 16.
  // Random crops and flips: the reference below must draw the same.
  const std::vector<std::string> flags = {
      "--dataset", h5, "--epochs", std::to_string(kEpochs), "--seed", "5", "--batch-size", "6",
      "--producer-batch", "12", "--image-size", "16", "--crop", "random", "--flip",
      "--resize", "resize(sizes=8:12:16,upgrade=0.5,mode=mixed,final_epochs=1)"};
  auto options = ResolveOptions(flags);
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  auto schedule = testing::ExpectedSchedule(*options, kSamples);
  ASSERT_NE(schedule, nullptr);

  // The reference: the same options through a Producer built directly, one consumer.
  ResizeSeen reference;
  {
    producer::ProducerConfig cfg;
    cfg.options = *options;
    cfg.expected_consumers = 1;
    cfg.max_consumer_batch = 6;
    cfg.socket_name = service_test::UniqueSocket("resize-ref");
    cfg.print_plan = false;
    auto ref = node::CreateNodeProducer(cfg);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    (*ref)->Start();
    auto c = Consumer::Attach((*ref)->address(), TrialOptions(6, kEpochs), 0, "reference");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ConsumeResized(c->get(), kEpochs, kChannels, PhotoLabel, &reference);
    c->reset();
    ASSERT_TRUE((*ref)->Wait().ok());
  }
  {
    SCOPED_TRACE("the reference leader");
    ExpectFollowsSchedule(reference, *schedule, 6, kEpochs);
  }
  const auto expected = Digests(reference);

  const std::string sock = service_test::UniqueSocket("resize");
  std::vector<std::string> argv = {BATCHCAST_CLI, "serve", "--socket", sock, "--max-batch", "6"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  service_test::Child serve = service_test::Spawn(argv, true);
  // The plan is printed before the service listens.
  const std::string plan = service_test::ReadLineWith(serve, "batchcast: progressive resizing");
  EXPECT_NE(plan.find("resize(sizes=8:12:16"), std::string::npos) << plan;
  const std::string ready = service_test::ReadLineWith(serve, "batchcast serve: listening");
  ASSERT_NE(ready.find("4 epochs"), std::string::npos) << ready;

  // Trials A (b=6) and B (b=4) read the whole run; both attach before A takes a batch, so
  // the stream is at most its ring ahead (epoch 0 has more positions than slots). C (b=5)
  // attaches once A is in epoch 1: it is admitted into the stream's epoch 1 (replayed from
  // its start, or caught up) or 2, and reads one epoch.
  auto a = Consumer::Attach(sock, TrialOptions(6, kEpochs), -1, "trial-a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = Consumer::Attach(sock, TrialOptions(4, kEpochs), -1, "trial-b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ResizeSeen seen_a, seen_b, seen_c;
  std::unique_ptr<Consumer> c;
  Status c_attach, resumed_behind;
  std::thread tc;
  bool c_started = false;
  auto join_c = [&](int64_t, int, const uint8_t*, size_t, int64_t, bool* label_ok) {
    *label_ok = true;
    if (c_started || seen_a.batches.empty() || seen_a.batches.back().epoch < 1) return true;
    c_started = true;
    auto attached = Consumer::Attach(sock, TrialOptions(5, 1), -1, "trial-c");
    if (!attached.ok()) {
      c_attach = attached.status();
      return true;
    }
    c = std::move(attached).value();
    tc = std::thread([&] { ConsumeResized(c.get(), kEpochs, kChannels, PhotoLabel, &seen_c); });
    return true;
  };
  // Once A is in epoch 2: a trial resuming at epoch 1 (behind the stream) is refused with the
  // schedule's reason, at attach or at its first batch (a schedule resumes at epoch starts).
  bool d_tried = false;
  auto resume_d = [&](int64_t id, int size, const uint8_t* px, size_t bytes, int64_t label,
                      bool* label_ok) {
    join_c(id, size, px, bytes, label, label_ok);
    if (d_tried || seen_a.batches.empty() || seen_a.batches.back().epoch < 2) return true;
    d_tried = true;
    Options behind = TrialOptions(4, 2);
    behind.start_epoch = 1;
    auto d = Consumer::Attach(sock, behind, -1, "trial-d");
    if (d.ok()) {
      Batch batch;
      resumed_behind = (*d)->Next(&batch);
    } else {
      resumed_behind = d.status();
    }
    return true;
  };
  std::thread ta([&] { ConsumeResized(a->get(), kEpochs, kChannels, resume_d, &seen_a); });
  std::thread tb([&] { ConsumeResized(b->get(), kEpochs, kChannels, PhotoLabel, &seen_b); });
  ta.join();
  tb.join();
  if (tc.joinable()) tc.join();
  ASSERT_TRUE(c_attach.ok()) << c_attach.ToString();
  ASSERT_TRUE(c_started) << "trial A never reached epoch 1";
  ASSERT_TRUE(d_tried) << "trial A never reached epoch 2";
  EXPECT_EQ(resumed_behind.code(), StatusCode::kFailedPrecondition) << resumed_behind.ToString();
  EXPECT_NE(resumed_behind.message().find("this leader runs a resize schedule, planned one "
                                          "epoch at a time"),
            std::string::npos) << resumed_behind.ToString();
  a->reset();
  b->reset();
  c.reset();
  // The service ends after its 4 epochs, by itself.
  int wstatus = 0;
  ASSERT_EQ(waitpid(serve.pid, &wstatus, 0), serve.pid);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << wstatus;
  if (serve.out != nullptr) fclose(serve.out);

  struct Trial {
    const char* name;
    const ResizeSeen* seen;
    int batch;
  };
  for (const Trial& t : {Trial{"trial A", &seen_a, 6}, Trial{"trial B", &seen_b, 4},
                         Trial{"late trial C", &seen_c, 5}}) {
    SCOPED_TRACE(t.name);
    ASSERT_FALSE(t.seen->batches.empty());
    const uint64_t first = t.seen->batches.front().epoch;
    const int epochs = t.seen == &seen_c ? 1 : kEpochs;
    if (t.seen == &seen_c) {
      EXPECT_TRUE(first == 1 || first == 2) << "admitted into stream epoch " << first;
    }
    ExpectFollowsSchedule(*t.seen, *schedule, t.batch, epochs, static_cast<int>(first));
    // Every sample's pixels are the directly built leader's of that epoch.
    int64_t compared = 0, differ = 0;
    for (const auto& [key, digest] : Digests(*t.seen)) {
      auto it = expected.find(key);
      ASSERT_NE(it, expected.end()) << "epoch " << key.first << " sample " << key.second;
      ++compared;
      if (it->second != digest) ++differ;
    }
    EXPECT_EQ(differ, 0) << "of " << compared << " samples";
  }
  ASSERT_EQ(system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace batchcast
