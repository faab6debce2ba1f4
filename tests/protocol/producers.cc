// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The adapter between the protocol test and the producers (see producers.h).
#include "tests/protocol/producers.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/errors.h"
#include "node/multinode.h"
#include "producer/producer.h"
#include "producer/stream_plan.h"
#include "tests/protocol/content.h"
#include "transport/shm/control.h"

namespace batchcast::protocol_test {
namespace {

Options BaseOptions(const ProducerSpec& s) {
  Options o;
  o.epochs = s.epochs;
  o.seed = s.seed;
  o.shuffle = true;
  o.producer_batch = static_cast<int>(s.producer_batch);
  o.batch_size = static_cast<int>(s.max_batch);
  o.ring_slots = s.ring_slots;
  o.buffer_depth = s.buffer_depth;
  o.heartbeat_ms = s.heartbeat_ms;
  o.late_join_window = s.late_join_window;
  o.views_max = s.views_max;
  return o;
}

std::unique_ptr<producer::BatchSource> Source(const ProducerSpec& s) {
  if (s.views_max > 1)
    return std::make_unique<node::ViewedSource>(s.samples, kImageSide, kChannels);
  return std::make_unique<node::SyntheticSource>(s.samples, kImageSide, kChannels);
}

// Every kind is one producer::Producer, configured as its front door configures it (the MPI
// runtime and the Python Leader: a leader; `batchcast serve`: a service that runs until
// stopped; the Python Producer: batches from an iterable; the multi-node leader).
producer::ProducerConfig ConfigOf(const ProducerSpec& s) {
  producer::ProducerConfig cfg;
  cfg.options = BaseOptions(s);
  cfg.expected_consumers = s.expect;
  cfg.max_consumer_batch = s.max_batch;
  cfg.socket_name = s.socket;
  cfg.job = "protocol";
  cfg.join_timeout_ms = 600000;
  cfg.end_when_empty = s.end_when_empty;
  cfg.print_plan = false;
  if (s.kind == ProducerKind::kService) {
    cfg.who = "service";
    cfg.until_stopped = s.epochs == 0;
    cfg.end_when_empty = false;
  }
  if (s.kind == ProducerKind::kExternal) cfg.who = "producer";
  return cfg;
}

class ProducerRun : public Producer {
 public:
  ProducerRun(std::unique_ptr<producer::Producer> p, bool clean_stop)
      : p_(std::move(p)), clean_stop_(clean_stop) {}
  std::string address() const override { return p_->address(); }
  Status Run() override { return p_->Run(); }
  // A service and a Python Producer stop cleanly; a leader is aborted.
  void Stop(const std::string& why) override {
    if (clean_stop_) p_->Stop(why);
    else p_->Abort(why);
  }
  int ConsumerWaiters() const override {
    return static_cast<int>(p_->ring().view().control->consumer_waiters.load());
  }

 private:
  std::unique_ptr<producer::Producer> p_;
  bool clean_stop_;
};

// The Python Producer's iterable: the stream plan's batches, one pass per epoch.
std::unique_ptr<producer::Feed> ExternalFeedOf(const ProducerSpec& s) {
  producer::ExternalFeedConfig cfg;
  cfg.layout.channels = kChannels;
  cfg.layout.height = cfg.layout.width = kImageSide;
  cfg.producer_batch = s.producer_batch;
  cfg.epoch_samples = s.samples;
  cfg.max_consumer_batch = s.max_batch;
  auto plan = std::make_shared<producer::StreamPlan>(s.samples, s.producer_batch, s.seed, true);
  auto batches = [plan](uint64_t e) {
    std::vector<std::vector<int64_t>> out;
    for (int64_t k = 0; k < plan->BatchesPerEpoch(); ++k) {
      auto b = plan->Batch(e, k);
      out.emplace_back(b.begin(), b.end());
    }
    return out;
  };
  return producer::MakeExternalFeed(
      cfg, std::make_unique<node::ListMaker>(batches, node::SyntheticWrite(kSampleBytes)));
}

}  // namespace

const char* ProducerName(ProducerKind kind) {
  switch (kind) {
    case ProducerKind::kLeader: return "leader";
    case ProducerKind::kService: return "service";
    case ProducerKind::kExternal: return "external";
    case ProducerKind::kMultinode: return "multinode";
  }
  return "?";
}

bool ParseProducer(const std::string& name, ProducerKind* kind) {
  for (ProducerKind k : {ProducerKind::kLeader, ProducerKind::kService, ProducerKind::kExternal,
                         ProducerKind::kMultinode})
    if (name == ProducerName(k)) {
      *kind = k;
      return true;
    }
  return false;
}

Result<std::unique_ptr<Producer>> CreateProducer(const ProducerSpec& s) {
  producer::ProducerConfig cfg = ConfigOf(s);
  std::unique_ptr<producer::Producer> p;
  switch (s.kind) {
    case ProducerKind::kLeader:
    case ProducerKind::kService: {
      BC_ASSIGN_OR_RETURN(p, producer::Producer::Create(cfg, Source(s)));
      break;
    }
    case ProducerKind::kExternal: {
      BC_ASSIGN_OR_RETURN(p, producer::Producer::Create(cfg, ExternalFeedOf(s),
                                                        producer::MakeLocalDistribution()));
      break;
    }
    case ProducerKind::kMultinode: {
      int rank = 0, size = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      node::MultinodeConfig m;
      m.mode = node::MultinodeMode::kReplicate;
      m.leaders = MPI_COMM_WORLD;
      m.node_index = rank;
      m.num_nodes = size;
      if (size > 1) cfg.socket_name += "-n" + std::to_string(rank);
      cfg.rank = rank;
      BC_ASSIGN_OR_RETURN(p, node::CreateMultinodeProducer(cfg, Source(s), m));
      break;
    }
  }
  const bool clean = s.kind == ProducerKind::kService || s.kind == ProducerKind::kExternal;
  return std::unique_ptr<Producer>(new ProducerRun(std::move(p), clean));
}

Result<LeaderView> QueryLeader(const std::string& socket, int64_t timeout_ms) {
  BC_ASSIGN_OR_RETURN(shm::StatusReply r, shm::QueryStatus(socket, timeout_ms));
  if (r.code != 0)
    return Status(static_cast<StatusCode>(r.code), std::string(r.message, strnlen(r.message,
                                                                                   sizeof(r.message))));
  LeaderView v;
  v.leader_pid = r.leader_pid;
  v.published = r.published;
  for (uint32_t i = 0; i < r.count && i < 64; ++i) {
    const shm::MemberStatus& m = r.members[i];
    MemberView mv;
    mv.id = m.id;
    mv.pid = m.pid;
    mv.addressed = m.state == static_cast<uint32_t>(shm::MemberState::kJoining) ||
                   m.state == static_cast<uint32_t>(shm::MemberState::kActive);
    mv.admitted = m.state == static_cast<uint32_t>(shm::MemberState::kActive);
    mv.attached_ms = m.attached_ns > 0 ? uint64_t(m.attached_ns / 1000000) : 0;
    v.members.push_back(mv);
  }
  return v;
}

}  // namespace batchcast::protocol_test
