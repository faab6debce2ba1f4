// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/multinode.h"

#include "producer/distribution.h"
#include "producer/exchange_feed.h"
#include "producer/feed.h"

namespace batchcast::node {

Result<std::unique_ptr<producer::Producer>> CreateMultinodeProducer(
    producer::ProducerConfig config, std::unique_ptr<producer::BatchSource> source,
    const MultinodeConfig& multi) {
  if (config.who == "leader") config.who = "multinode leader";
  if (multi.mode == MultinodeMode::kShard) {
    producer::ShardConfig shard;
    shard.total_trainers = multi.total_trainers;
    shard.trainer_index = multi.trainer_index;
    shard.node_index = multi.node_index;
    return producer::Producer::Create(
        config, producer::MakePipelineFeed(std::move(source), config.print_plan),
        producer::MakeShardDistribution(shard));
  }
  producer::ExchangeConfig ex;
  ex.leaders = multi.leaders;
  ex.node_index = multi.node_index;
  ex.num_nodes = multi.num_nodes;
  ex.rank = config.rank;
  ex.exchange_depth = multi.exchange_depth;
  ex.decode_slices = multi.decode_slices;
  ex.print_plan = config.print_plan && multi.node_index == 0;  // one copy of the plan per job
  auto [feed, distribution] = producer::MakeReplicateAcrossNodes(std::move(source), ex);
  return producer::Producer::Create(config, std::move(feed), std::move(distribution));
}

}  // namespace batchcast::node
