// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Randomized carving rounds over an external feed (named_tensor_test.cc,
// ragged_tensor_test.cc): random epoch sizes, producer batches (every epoch's last partial,
// ids in a random order), 1 to 3 consumers at random batch sizes and carvings. Every element
// a consumer receives is checked against its sample id by the test's own function; every
// sample arrives exactly once per epoch with exact carving, at least once unless the
// consumer drops or shards.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/consumer.h"
#include "producer/feed.h"
#include "producer/producer.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::node {

// What one round's samples look like: the feed's layout and tensors (its batch sizes are the
// round's), how a sample is written at a slot position, and how many elements of a consumer
// batch do not belong to their sample's id.
struct RoundFeed {
  producer::ExternalFeedConfig feed;
  ListMaker::Write write;
  std::function<int64_t(const Batch&)> bad;
};

struct CarveRounds {
  uint64_t seed = 0;
  int rounds = 12;
  int64_t max_samples = 150;    // per epoch
  uint32_t max_batch = 16;      // the largest consumer batch
  int modes = 5;                // RandomCarve's first `modes` carvings
  std::string socket_tag;       // in the socket names
  std::function<RoundFeed(CounterRng& rng, int64_t producer_batch)> feed;
};

// The status of creating a Producer over `feed` (a spec test's refusal).
inline Status CreateFeedProducer(const producer::ExternalFeedConfig& feed, const std::string& tag) {
  static std::atomic<int> sockets{0};
  producer::ProducerConfig cfg;
  cfg.who = "producer";
  cfg.socket_name = "batchcast-test-" + std::to_string(getpid()) + "-" + tag + "-spec-" +
                    std::to_string(sockets++);
  auto p = producer::Producer::Create(
      cfg, producer::MakeExternalFeed(feed, std::make_unique<ListMaker>(nullptr, nullptr)),
      producer::MakeLocalDistribution());
  return p.ok() ? Status::Ok() : p.status();
}

inline void RunCarveRounds(const CarveRounds& r) {
  static std::atomic<int> sockets{0};
  for (int round = 0; round < r.rounds; ++round) {
    CounterRng rng(HashCombine(r.seed, uint64_t(round), 1));
    const int64_t n = 1 + int64_t(rng.Below(uint64_t(r.max_samples)));
    const uint32_t max_b = 1 + uint32_t(rng.Below(r.max_batch));
    const int64_t p = int64_t(max_b) * (1 + int64_t(rng.Below(3))) + int64_t(rng.Below(max_b));
    RoundFeed f = r.feed(rng, p);
    const int epochs = 2, consumers = 1 + int(rng.Below(3));
    SCOPED_TRACE(::testing::Message() << "seed " << r.seed << " round " << round << ": n " << n
                                    << " producer batch " << p << " max_b " << max_b);
    const auto epoch_batches = RandomEpochBatches(rng, n, p, epochs);
    f.feed.producer_batch = p;
    f.feed.epoch_samples = n;
    f.feed.max_consumer_batch = max_b;
    producer::ProducerConfig cfg;
    cfg.who = "producer";
    cfg.options.epochs = epochs;
    cfg.expected_consumers = consumers;
    cfg.socket_name = "batchcast-test-" + std::to_string(getpid()) + "-" + r.socket_tag + "-" +
                      std::to_string(sockets++);
    auto prod = producer::Producer::Create(
        cfg,
        producer::MakeExternalFeed(
            f.feed, std::make_unique<ListMaker>([&](uint64_t e) { return epoch_batches[e]; },
                                                f.write)),
        producer::MakeLocalDistribution());
    ASSERT_TRUE(prod.ok()) << prod.status().ToString();
    std::vector<std::unique_ptr<Consumer>> cs;
    std::vector<int> modes;
    for (int i = 0; i < consumers; ++i) {
      Options co;
      co.epochs = epochs;
      co.batch_size = i == 0 ? int(max_b) : 1 + int(rng.Below(max_b));
      modes.push_back(RandomCarve(rng, r.modes, &co));
      auto c = Consumer::Attach((*prod)->address(), co, i);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      cs.push_back(std::move(c).value());
    }
    struct Seen {
      std::map<uint64_t, std::multiset<int64_t>> ids;  // epoch -> ids received
      int64_t bad = 0, batches = 0;
      Status status;
    };
    std::vector<Seen> seen(static_cast<size_t>(consumers));
    std::vector<std::thread> threads;
    for (int i = 0; i < consumers; ++i)
      threads.emplace_back([&, i] {
        Seen& s = seen[i];
        s.status = ForEachBatch(cs[i].get(), [&](const Batch& b) {
          s.bad += f.bad(b);
          for (int64_t k = 0; k < b.size(); ++k) s.ids[b.info().epoch].insert(b.sample_ids()[k]);
          s.batches += 1;
        });
      });
    EXPECT_TRUE((*prod)->Run().ok());
    for (auto& t : threads) t.join();
    for (int i = 0; i < consumers; ++i) {
      SCOPED_TRACE(::testing::Message() << "consumer " << i << " mode " << modes[i]);
      ASSERT_TRUE(seen[i].status.ok()) << seen[i].status.ToString();
      EXPECT_EQ(seen[i].bad, 0);
      EXPECT_GT(seen[i].batches, 0);
      for (int e = 0; e < epochs; ++e) {
        const std::multiset<int64_t>& got = seen[i].ids[uint64_t(e)];
        const std::set<int64_t> distinct(got.begin(), got.end());
        for (int64_t id : distinct) EXPECT_TRUE(id >= 1000 * e && id < 1000 * e + n) << id;
        if (modes[i] == kModeExact) {
          EXPECT_EQ(int64_t(got.size()), n);  // exactly once
        }
        if (modes[i] != kModeDropLast && modes[i] != kModeShard) {
          EXPECT_EQ(int64_t(distinct.size()), n);
        }
      }
    }
  }
}

}  // namespace batchcast::node
