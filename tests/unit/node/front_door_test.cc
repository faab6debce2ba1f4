// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What every front door over the producer core (runtime/producer/) must do at creation:
// refuse combinations it cannot support with a message naming the fix, and tell consumers
// how many epochs the stream has (RingConfig::stream_epochs) when it knows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>

#include "node/external_producer.h"
#include "node/leader.h"
#include "node/service.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::node {
namespace {

std::string Socket(const char* tag) {
  static std::atomic<int> n{0};
  return "batchcast-test-" + std::to_string(getpid()) + "-fd-" + tag + "-" + std::to_string(n++);
}

ServiceConfig ServiceWith(int64_t epochs) {
  ServiceConfig c;
  c.socket_name = Socket("svc");
  c.epochs = epochs;
  c.options.batch_size = 8;
  c.options.producer_batch = 16;
  return c;
}

TEST(FrontDoorTest, ServiceRefusesProgressiveResizing) {
  ServiceConfig c = ServiceWith(2);
  c.options.resize = "resize(min=96,max=224,step=32)";
  auto s = Service::Create(c, std::make_unique<SyntheticSource>(64));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("progressive resizing (option 'resize') is not supported"),
            std::string::npos) << s.status().message();
}

TEST(FrontDoorTest, LateJoinWindowOutsideZeroToOneIsRefused) {
  ServiceConfig c = ServiceWith(1);
  c.late_join_window = 1.5;
  auto s = Service::Create(c, std::make_unique<SyntheticSource>(64));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("late_join_window 1.5 is outside [0, 1]"),
            std::string::npos) << s.status().message();
  LeaderConfig l;
  l.options.batch_size = 8;
  l.socket_name = Socket("leader");
  l.late_join_window = -0.1;
  auto leader = Leader::Create(l, std::make_unique<SyntheticSource>(64));
  ASSERT_FALSE(leader.ok());
  EXPECT_NE(leader.status().message().find("leader: late_join_window"), std::string::npos)
      << leader.status().message();
}

TEST(FrontDoorTest, EveryProducerTellsConsumersItsEpochs) {
  auto bounded = Service::Create(ServiceWith(3), std::make_unique<SyntheticSource>(64));
  ASSERT_TRUE(bounded.ok()) << bounded.status().ToString();
  EXPECT_EQ((*bounded)->ring().config().stream_epochs, 3u);
  auto unbounded = Service::Create(ServiceWith(0), std::make_unique<SyntheticSource>(64));
  ASSERT_TRUE(unbounded.ok()) << unbounded.status().ToString();
  EXPECT_EQ((*unbounded)->ring().config().stream_epochs, 0u);  // runs until stopped

  LeaderConfig l;
  l.options.batch_size = 8;
  l.options.epochs = 4;
  l.socket_name = Socket("leader");
  auto leader = Leader::Create(l, std::make_unique<SyntheticSource>(64));
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  EXPECT_EQ((*leader)->ring().config().stream_epochs, 4u);

  ExternalProducerConfig e;
  e.layout.channels = 3;
  e.layout.height = e.layout.width = 4;
  e.producer_batch = 16;
  e.max_consumer_batch = 8;
  e.epochs = 5;
  e.socket_name = Socket("ext");
  auto p = ExternalProducer::Create(e);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->ring().config().stream_epochs, 5u);
  (*p)->End();
}

}  // namespace
}  // namespace batchcast::node
