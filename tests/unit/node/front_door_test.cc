// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What every front door's producer::Producer must do at creation: refuse what its front door
// does not read (the front-door table) with a message naming the option and the front door,
// and tell consumers how many epochs the stream has (RingConfig::stream_epochs) when it knows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>

#include "core/option_scope.h"
#include "producer/feed.h"
#include "producer/producer.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::node {
namespace {

std::string Socket(const char* tag) {
  static std::atomic<int> n{0};
  return "batchcast-test-" + std::to_string(getpid()) + "-fd-" + tag + "-" + std::to_string(n++);
}

producer::ProducerConfig ServiceWith(int64_t epochs) {
  producer::ProducerConfig c;  // `batchcast serve`'s configuration
  c.front_door = FrontDoor::kServe;
  c.who = "service";
  c.socket_name = Socket("svc");
  c.until_stopped = epochs == 0;
  c.end_when_empty = false;
  c.options.batch_size = 8;
  c.options.producer_batch = 16;
  if (epochs > 0) c.options.epochs = static_cast<int>(epochs);
  return c;
}

// batchcast serve runs a schedule over the epochs it is given; until stopped it has no run
// to plan over. The front doors that cannot run one say why (the table's cause).
TEST(FrontDoorTest, ServiceRunsProgressiveResizingOverItsEpochsAndOthersSayWhyNot) {
  producer::ProducerConfig c = ServiceWith(0);
  ASSERT_TRUE(SetOption(&c.options, "resize", "resize(sizes=8:16,upgrade=0.5)").ok());
  auto until_stopped = producer::Producer::Create(c, std::make_unique<SizedSource>(64, 16, 3));
  ASSERT_FALSE(until_stopped.ok());
  EXPECT_EQ(until_stopped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(until_stopped.status().message().find(
                "service: option 'resize' plans progressive resizing over the run's epochs"),
            std::string::npos) << until_stopped.status().message();
  EXPECT_NE(until_stopped.status().message().find("batchcast serve --epochs N"),
            std::string::npos) << until_stopped.status().message();
  EXPECT_FALSE(producer::CheckConfig(c).ok());  // before any dataset opens

  c = ServiceWith(3);
  ASSERT_TRUE(SetOption(&c.options, "resize", "resize(sizes=8:16,upgrade=0.5)").ok());
  c.print_plan = false;
  auto svc = producer::Producer::Create(c, std::make_unique<SizedSource>(64, 16, 3));
  ASSERT_TRUE(svc.ok()) << svc.status().ToString();
  ASSERT_NE((*svc)->resize_schedule(), nullptr);
  EXPECT_EQ((*svc)->ring().config().resize_spec.rfind("resize(sizes=8:16", 0), 0u)
      << (*svc)->ring().config().resize_spec;
  EXPECT_EQ((*svc)->ring().config().stream_epochs, 3u);

  // The multi-node leader runs it in replicate mode (tests/mpi: mpi_multinode_replicate_resize_*)
  // and refuses it in shard mode, naming the cause and what to do instead.
  EXPECT_TRUE(CheckFrontDoorOptions(c.options, FrontDoor::kMultinode).ok());
  Options shard = c.options;
  ASSERT_TRUE(SetOption(&shard, "mode", "shard").ok());
  Options shard_env = shard;  // a job-wide setting: refused all the same
  for (auto& [key, source] : shard_env.sources)
    if (key == "resize") source = "env";
  for (const Options& o : {shard, shard_env}) {
    Status st = CheckFrontDoorOptions(o, FrontDoor::kMultinode);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    for (const char* part : {"multi-node leader: option 'resize' (set ",
                             "is not read by multi-node leader with mode=shard: ",
                             "parts scaled per size are not planned", "Use mode=replicate"})
      EXPECT_NE(st.message().find(part), std::string::npos) << part << " in " << st.message();
  }
  Status st = CheckFrontDoorOptions(c.options, FrontDoor::kPythonProducer);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("option 'resize' (set in code) is not read by"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("cannot follow one"), std::string::npos) << st.message();
}

TEST(FrontDoorTest, LateJoinWindowOutsideZeroToOneIsRefused) {
  producer::ProducerConfig c = ServiceWith(1);
  c.options.late_join_window = 1.5;
  auto s = producer::Producer::Create(c, std::make_unique<SyntheticSource>(64));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("option 'late_join_window' must be a fraction of an "
                                      "epoch in [0, 1], got 1.5"),
            std::string::npos) << s.status().message();
  EXPECT_FALSE(ResolveOptions({"--late-join-window=-0.1"}).ok());
}

TEST(FrontDoorTest, EveryProducerTellsConsumersItsEpochs) {
  auto bounded = producer::Producer::Create(ServiceWith(3), std::make_unique<SyntheticSource>(64));
  ASSERT_TRUE(bounded.ok()) << bounded.status().ToString();
  EXPECT_EQ((*bounded)->ring().config().stream_epochs, 3u);
  auto unbounded = producer::Producer::Create(ServiceWith(0), std::make_unique<SyntheticSource>(64));
  ASSERT_TRUE(unbounded.ok()) << unbounded.status().ToString();
  EXPECT_EQ((*unbounded)->ring().config().stream_epochs, 0u);  // runs until stopped

  producer::ProducerConfig l;
  l.options.batch_size = 8;
  l.options.epochs = 4;
  l.socket_name = Socket("leader");
  auto leader = producer::Producer::Create(l, std::make_unique<SyntheticSource>(64));
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  EXPECT_EQ((*leader)->ring().config().stream_epochs, 4u);

  producer::ExternalFeedConfig e;
  e.layout.channels = 3;
  e.layout.height = e.layout.width = 4;
  e.producer_batch = 16;
  e.max_consumer_batch = 8;
  producer::ProducerConfig ec;
  ec.front_door = FrontDoor::kPythonProducer;
  ec.who = "producer";
  ec.options.epochs = 5;
  ec.socket_name = Socket("ext");
  auto p = producer::Producer::Create(
      ec, producer::MakeExternalFeed(e, std::make_unique<ListMaker>(nullptr, nullptr)),
      producer::MakeLocalDistribution());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->ring().config().stream_epochs, 5u);
}

// One slot-count rule (producer::RingSlots): every producer's ring holds ring_slots, or
// buffer_depth + 2, positions ahead of its slowest consumer.
TEST(FrontDoorTest, EveryProducerHasTheSameSlotCountRule) {
  for (int depth : {1, 2, 5}) {
    producer::ProducerConfig l;
    l.options.batch_size = 8;
    l.options.buffer_depth = depth;
    l.socket_name = Socket("slots");
    auto leader = producer::Producer::Create(l, std::make_unique<SyntheticSource>(64));
    ASSERT_TRUE(leader.ok()) << leader.status().ToString();
    EXPECT_EQ((*leader)->ring().config().num_slots, uint32_t(depth + 2));
    producer::ExternalFeedConfig e;
    e.layout.channels = e.layout.height = e.layout.width = 2;
    e.producer_batch = 16;
    e.max_consumer_batch = 8;
    producer::ProducerConfig ec = l;
    ec.socket_name = Socket("slots-ext");
    auto p = producer::Producer::Create(
        ec, producer::MakeExternalFeed(e, std::make_unique<ListMaker>(nullptr, nullptr)),
        producer::MakeLocalDistribution());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ((*p)->ring().config().num_slots, uint32_t(depth + 2));
  }
}

}  // namespace
}  // namespace batchcast::node
