// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast serve` end to end: a real HDF5 dataset (converted from generated IDX files by
// `batchcast convert idx`), the real decode pipeline, a C++ consumer, `batchcast status`,
// and SIGTERM (clean exit; the attached consumer gets "service stopped").
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "batchcast/consumer.h"
#include "tests/service/service_test_util.h"

namespace batchcast {
namespace {

TEST(ServeCliTest, ServesARealDatasetReportsStatusAndStopsOnSigterm) {
  const int n = 200;
  const std::string dir = ::testing::TempDir() + "/bc_serve_cli_" + std::to_string(getpid());
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  service_test::WriteIdx(dir + "/img.idx", dir + "/lab.idx", n);
  const std::string h5 = dir + "/set.h5";
  std::string conv = service_test::RunShell(std::string(BATCHCAST_CLI) + " convert idx --images " + dir +
                         "/img.idx --labels " + dir + "/lab.idx --out " + h5);
  ASSERT_EQ(access(h5.c_str(), R_OK), 0) << conv;

  const std::string sock = service_test::UniqueSocket("cli");
  service_test::Child serve = service_test::Spawn(
      {BATCHCAST_CLI, "serve", "--dataset", h5, "--batch-size", "10", "--socket", sock,
       "--views-max", "2", "--telemetry", "telemetry(json=" + dir + "/svc.json,summary=off)"},
      true);
  std::string ready = service_test::ReadLineWith(serve, "batchcast serve: listening");
  ASSERT_NE(ready.find("@" + sock), std::string::npos) << ready;
  ASSERT_NE(ready.find("until stopped"), std::string::npos) << ready;
  // It counts producer batches (batch_size 10 -> producer batches of 20), not a trial's.
  EXPECT_NE(ready.find(" producer batches/epoch"), std::string::npos) << ready;
  {  // A trial's batch above the service's largest: the fix is the service's own flag.
    Options big;
    big.batch_size = 20;
    big.connect_timeout = 0;
    auto refused = Consumer::Attach(sock, big, -1, "too-big");
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find(
                  "batch size 20 is outside 1..10 (the largest consumer batch this stream "
                  "admits): start batchcast serve with a larger --max-batch"),
              std::string::npos) << refused.status().ToString();
  }

  Options o;
  o.batch_size = 10;
  o.epochs = 2;
  o.heartbeat_ms = 1000;
  auto c = Consumer::Attach(sock, o, -1, "cli-trial");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<int> seen(n, 0);
  int epochs = 0;
  Batch b;
  for (;;) {
    Status st = (*c)->Next(&b);
    if (st.code() == StatusCode::kEndOfStream) break;
    ASSERT_TRUE(st.ok()) << st.ToString();
    const auto* labels = static_cast<const int64_t*>(b.labels().data);
    for (int64_t i = 0; i < b.size() - b.info().repeats; ++i) {
      const int64_t id = b.sample_ids()[i];
      ASSERT_TRUE(id >= 0 && id < n);
      EXPECT_EQ(labels[i], id % 10);
      seen[static_cast<size_t>(id)] += 1;
    }
    if (b.info().last_in_epoch) ++epochs;
  }
  EXPECT_EQ(epochs, 2);
  for (int i = 0; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 2) << "sample " << i;
  b.Release();
  c->reset();

  // A trial resuming at epoch 0 batch 1, which the stream has passed: the rest of epoch 0 is
  // replayed to it alone (docs/service.md, "Resuming a trial"), and counted.
  Options ro = o;
  ro.epochs = 1;
  ro.start_batch = 1;
  auto resumed = Consumer::Attach(sock, ro, -1, "resumed");
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  std::vector<int> rest(n, 0);
  uint64_t index = 1;
  for (Status st; (st = (*resumed)->Next(&b)).code() != StatusCode::kEndOfStream;) {
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(b.info().epoch, 0u);
    EXPECT_EQ(b.info().index, index++);
    for (int64_t i = 0; i < b.size(); ++i) rest[static_cast<size_t>(b.sample_ids()[i])] += 1;
  }
  EXPECT_EQ(std::count(rest.begin(), rest.end(), 1), n - 10);  // all but its first batch
  EXPECT_EQ(std::count(rest.begin(), rest.end(), 0), 10);
  b.Release();
  resumed->reset();
  auto rj = nlohmann::json::parse(
      service_test::RunShell(std::string(BATCHCAST_CLI) + " status --json --socket " + sock));
  EXPECT_EQ(rj["resume_replays"], 1) << rj.dump();
  EXPECT_GE(rj["resume_replayed_batches"].get<int64_t>(), (n - 10) / 20) << rj.dump();

  // The last trial declares a view of its own: status names its view group.
  Options vo = o;
  vo.view = "view(size=6)";
  auto victim = Consumer::Attach(sock, vo, -1, "victim");
  ASSERT_TRUE(victim.ok()) << victim.status().ToString();
  ASSERT_TRUE((*victim)->Next(&b).ok());
  EXPECT_EQ(b.images().shape[2], 6);
  auto j = nlohmann::json::parse(
      service_test::RunShell(std::string(BATCHCAST_CLI) + " status --json --socket " + sock));
  ASSERT_EQ(j["consumers"].size(), 1u) << j.dump();
  EXPECT_EQ(j["consumers"][0]["name"], "victim");
  EXPECT_EQ(j["stream"], "running");
  EXPECT_EQ(j["consumers"][0]["group"], 1) << j.dump();
  EXPECT_NE(j["consumers"][0]["view"].get<std::string>().find("view(size=6,"), std::string::npos)
      << j.dump();
  EXPECT_EQ(j["views_max"], 2);
  ASSERT_EQ(j["view_groups"].size(), 2u) << j.dump();
  EXPECT_EQ(j["view_groups"][0]["group"], 0);
  EXPECT_EQ(j["view_groups"][0]["members"], 0);
  EXPECT_EQ(j["view_groups"][1]["group"], 1);
  EXPECT_EQ(j["view_groups"][1]["members"], 1);
  EXPECT_EQ(j["view_groups"][1]["slot_bytes"], j["view_room_used_bytes"]) << j.dump();
  EXPECT_EQ(j["view_groups"][1]["image_size"], 6) << j.dump();  // its size now
  EXPECT_EQ(j["view_groups"][0]["image_size"], 0) << j.dump();  // the leader's: each batch's
  EXPECT_GT(j["view_room_used_bytes"].get<int64_t>(), 0) << j.dump();
  const std::string table =
      service_test::RunShell(std::string(BATCHCAST_CLI) + " status --socket " + sock);
  EXPECT_NE(table.find("view groups: 2 of views_max=2, view room "), std::string::npos) << table;
  EXPECT_NE(table.find("  group 1: 1 consumer, "), std::string::npos) << table;
  EXPECT_NE(table.find(", 6 px now\n"), std::string::npos) << table;

  kill(serve.pid, SIGTERM);
  std::string stopped = service_test::ReadLineWith(serve, "batchcast serve: stopped");
  EXPECT_FALSE(stopped.empty());
  int status = service_test::Wait(serve);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  Status st;
  for (int i = 0; i < 100 && st.ok(); ++i) st = (*victim)->Next(&b);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("service stopped: SIGTERM received"), std::string::npos)
      << st.message();
  // The service's telemetry: the batches it produced for the two epochs above (and more).
  std::FILE* tf = std::fopen((dir + "/svc.json").c_str(), "r");
  ASSERT_NE(tf, nullptr) << "batchcast serve wrote no telemetry file";
  nlohmann::json tj = nlohmann::json::parse(tf);
  std::fclose(tf);
  ASSERT_EQ(tj["ranks"].size(), 1u);
  EXPECT_EQ(tj["ranks"][0]["role"], "leader");
  int64_t produced = 0;
  for (const auto& v : tj["ranks"][0]["series"]["batches_produced"]) produced += v.get<int64_t>();
  EXPECT_GE(produced, 2 * (n + 9) / 10 / 2) << tj["ranks"][0]["series"].dump();
  int64_t replayed = 0;  // the resumed trial's replay (kBatchesReplayed)
  for (const auto& v : tj["ranks"][0]["series"]["batches_replayed"]) replayed += v.get<int64_t>();
  EXPECT_GE(replayed, rj["resume_replayed_batches"].get<int64_t>())
      << tj["ranks"][0]["series"].dump();
  ASSERT_EQ(system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace batchcast
