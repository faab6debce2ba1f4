// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The adapter between the protocol test and the producers (see producers.h).
#include "tests/protocol/producers.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/errors.h"
#include "node/external_producer.h"
#include "node/leader.h"
#include "node/multinode_leader.h"
#include "node/service.h"
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
  return o;
}

std::unique_ptr<producer::BatchSource> Source(const ProducerSpec& s) {
  return std::make_unique<node::SyntheticSource>(s.samples, kImageSide, kChannels);
}

int Waiters(shm::RingLeader& ring) {
  return static_cast<int>(ring.view().control->consumer_waiters.load());
}

node::LeaderConfig LeaderConfigOf(const ProducerSpec& s) {
  node::LeaderConfig cfg;
  cfg.options = BaseOptions(s);
  cfg.expected_consumers = s.expect;
  cfg.max_consumer_batch = s.max_batch;
  cfg.socket_name = s.socket;
  cfg.job = "protocol";
  cfg.join_timeout_ms = 600000;
  cfg.end_when_empty = s.end_when_empty;
  cfg.print_plan = false;
  return cfg;
}

class LeaderProducer : public Producer {
 public:
  explicit LeaderProducer(std::unique_ptr<node::Leader> l) : l_(std::move(l)) {}
  std::string address() const override { return l_->address(); }
  Status Run() override { return l_->Run(); }
  void Stop(const std::string& why) override { l_->Abort(why); }
  int ConsumerWaiters() const override { return Waiters(l_->ring()); }

 private:
  std::unique_ptr<node::Leader> l_;
};

class ServiceProducer : public Producer {
 public:
  ServiceProducer(std::unique_ptr<node::Service> s, int expect)
      : s_(std::move(s)), expect_(expect) {}
  std::string address() const override { return s_->socket_name(); }
  // The scenario's first consumers start together: like trials launched at once, they are
  // all there before the service's first batch (later ones are the late joiners).
  Status Run() override {
    if (expect_ > 0) {
      Status st = s_->ring().WaitForJoined(expect_, 600000);
      if (!st.ok()) return st;
    }
    return s_->Run();
  }
  void Stop(const std::string& why) override { s_->Stop(why); }
  int ConsumerWaiters() const override { return Waiters(s_->ring()); }

 private:
  std::unique_ptr<node::Service> s_;
  int expect_ = 0;
};

// ExternalProducer fed by a loop, as the Python Producer feeds it (producer.py run()).
class ExternalLoop : public Producer {
 public:
  ExternalLoop(std::unique_ptr<node::ExternalProducer> p, const ProducerSpec& s)
      : p_(std::move(p)), spec_(s), plan_(s.samples, s.producer_batch, s.seed, true) {}
  std::string address() const override { return p_->address(); }
  void Stop(const std::string& why) override {
    stop_.store(true);
    p_->ring().Fail(why);
  }
  int ConsumerWaiters() const override { return Waiters(p_->ring()); }
  Status Run() override {
    Status st = Status(StatusCode::kDeadlineExceeded, "");
    while (st.code() == StatusCode::kDeadlineExceeded && !stop_.load())  // as the binding does
      st = p_->WaitForConsumers(spec_.expect, 200);
    for (uint64_t e = 0; st.ok() && e < uint64_t(spec_.epochs) && !stop_.load(); ++e) {
      if (e > 0) p_->AdmitJoining();  // joiners start at an epoch boundary
      const int64_t bpe = plan_.BatchesPerEpoch();
      for (int64_t k = 0; st.ok() && k < bpe && !stop_.load(); ++k) {
        if (p_->active_consumers() == 0 && p_->joining_consumers() == 0 && spec_.end_when_empty) {
          p_->End();
          return Status::Ok();
        }
        st = PublishOne(e, k, k + 1 == bpe);
      }
    }
    if (stop_.load()) return Status::Ok();
    if (!st.ok()) {
      p_->Fail(st.message());
      return st;
    }
    p_->End();
    return Status::Ok();
  }

 private:
  Status PublishOne(uint64_t e, int64_t k, bool last) {
    BC_ASSIGN_OR_RETURN(node::ExternalSlot slot, p_->Begin(-1));
    std::span<const int64_t> ids = plan_.Batch(e, k);
    for (size_t i = 0; i < ids.size(); ++i) {
      uint8_t* img = slot.images + i * kSampleBytes;
      for (size_t b = 0; b < kSampleBytes; ++b) img[b] = Pixel(ids[i], b);
      slot.labels[i] = Label(ids[i]);
      slot.ids[i] = ids[i];
    }
    node::ExternalCommit c;
    c.epoch = e;
    c.batch_in_epoch = static_cast<uint64_t>(k);
    c.num_samples = static_cast<int64_t>(ids.size());
    c.last_in_epoch = last;
    return p_->Commit(slot, c, /*ids_written=*/true);
  }

  std::unique_ptr<node::ExternalProducer> p_;
  ProducerSpec spec_;
  producer::StreamPlan plan_;
  std::atomic<bool> stop_{false};
};

class MultinodeProducer : public Producer {
 public:
  explicit MultinodeProducer(std::unique_ptr<node::MultinodeLeader> l) : l_(std::move(l)) {}
  std::string address() const override { return l_->address(); }
  Status Run() override { return l_->Run(); }
  void Stop(const std::string& why) override { l_->Abort(why); }
  int ConsumerWaiters() const override { return Waiters(l_->ring()); }

 private:
  std::unique_ptr<node::MultinodeLeader> l_;
};

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
  switch (s.kind) {
    case ProducerKind::kLeader: {
      BC_ASSIGN_OR_RETURN(auto l, node::Leader::Create(LeaderConfigOf(s), Source(s)));
      return std::unique_ptr<Producer>(new LeaderProducer(std::move(l)));
    }
    case ProducerKind::kService: {
      node::ServiceConfig cfg;
      cfg.options = BaseOptions(s);
      cfg.socket_name = s.socket;
      cfg.epochs = s.epochs;
      cfg.late_join_window = s.late_join_window;
      cfg.max_consumer_batch = s.max_batch;
      BC_ASSIGN_OR_RETURN(auto svc, node::Service::Create(cfg, Source(s)));
      return std::unique_ptr<Producer>(new ServiceProducer(std::move(svc), s.expect));
    }
    case ProducerKind::kExternal: {
      node::ExternalProducerConfig cfg;
      cfg.layout.channels = kChannels;
      cfg.layout.height = cfg.layout.width = kImageSide;
      cfg.producer_batch = s.producer_batch;
      cfg.epoch_samples = s.samples;
      cfg.epochs = s.epochs;  // as the Python Producer passes its epoch count
      cfg.max_consumer_batch = s.max_batch;
      cfg.ring_slots = s.ring_slots > 0 ? uint32_t(s.ring_slots) : uint32_t(s.buffer_depth + 3);  // producer.py
      cfg.heartbeat_ms = s.heartbeat_ms;
      cfg.socket_name = s.socket;
      cfg.job = "protocol";
      BC_ASSIGN_OR_RETURN(auto p, node::ExternalProducer::Create(cfg));
      return std::unique_ptr<Producer>(new ExternalLoop(std::move(p), s));
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
      node::LeaderConfig cfg = LeaderConfigOf(s);
      if (size > 1) cfg.socket_name += "-n" + std::to_string(rank);
      cfg.rank = rank;
      BC_ASSIGN_OR_RETURN(auto l, node::MultinodeLeader::Create(cfg, Source(s), m));
      return std::unique_ptr<Producer>(new MultinodeProducer(std::move(l)));
    }
  }
  return InvalidArgumentError("unknown producer kind");
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
    mv.attached_ms = m.attached_ns > 0 ? uint64_t(m.attached_ns / 1000000) : 0;
    v.members.push_back(mv);
  }
  return v;
}

}  // namespace batchcast::protocol_test
