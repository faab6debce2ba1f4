// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/service.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/option_scope.h"
#include "core/log.h"
#include "producer/epoch_loop.h"
#include "producer/slot_layout.h"
#include "telemetry/metrics.h"
#include "transport/shm/control.h"

namespace batchcast::node {

std::string DefaultServiceSocket() { return "batchcast-" + std::to_string(getuid()) + "-service"; }

Service::Service(const ServiceConfig& config, std::unique_ptr<producer::BatchSource> source,
                 int64_t p)
    : config_(config),
      source_(std::move(source)),
      plan_(std::min<int64_t>(source_->num_samples(),
                              config.options.limit_samples > 0 ? config.options.limit_samples
                                                               : source_->num_samples()),
            p, config.options.seed, config.options.shuffle) {}

Service::~Service() {
  // A look-ahead fill still writes into a slot of the ring: finish it before the ring goes.
  if (writer_ != nullptr) writer_->DrainLookahead();
  if (ring_ == nullptr) return;
  if (!ring_->failed()) ring_->End();
  ring_.reset();  // joins the control thread, whose status provider reads this object
}

Result<std::unique_ptr<Service>> Service::Create(const ServiceConfig& config,
                                                 std::unique_ptr<producer::BatchSource> source) {
  const Options& o = config.options;
  if (!o.resize.empty())
    return FailedPreconditionError("service: progressive resizing (option 'resize') is not supported "
                              "by `batchcast serve` yet; run it under batchcast-run");
  if (!(config.late_join_window >= 0.0 && config.late_join_window <= 1.0))
    return InvalidArgumentError("service: late_join_window {} is outside [0, 1]",
                                config.late_join_window);
  if (config.epochs < 0)
    return InvalidArgumentError("service: epochs {} is negative (0 runs until stopped)",
                                config.epochs);
  BC_RETURN_IF_ERROR(CheckSharedStreamOptions(o, "service", "the trials' consumers"));
  if (source->num_samples() <= 0) return InvalidArgumentError("service: the dataset has no samples");
  BC_ASSIGN_OR_RETURN(producer::BatchSizes sizes,
                      producer::ResolveBatchSizes(o, config.max_consumer_batch, "service"));
  const int64_t p = sizes.producer_batch;
  const uint32_t max_b = sizes.max_consumer_batch;
  ServiceConfig c = config;
  if (c.socket_name.empty()) c.socket_name = DefaultServiceSocket();
  std::unique_ptr<Service> s(new Service(c, std::move(source), p));
  s->layout_ = s->source_->MaxLayout();
  producer::SlotLayout slot = producer::ComputeSlotLayout(p, max_b, s->layout_);
  std::vector<std::unique_ptr<producer::BatchStage>> stages;
  BC_RETURN_IF_ERROR(producer::PrepareStages(o.stage, s->layout_, {}, p, o.threads, "service",
                                             &slot, &stages));
  shm::RingConfig rc = producer::RingConfigFor(slot, producer::RingSlots(o), max_b,
                                               static_cast<uint64_t>(p),
                                               static_cast<uint64_t>(s->plan_.num_samples()),
                                               c.epochs);
  rc.socket_name = c.socket_name;
  rc.batch_limit_advice =
      "start batchcast serve with a larger --max-batch (default: its batch_size), or ask for a "
      "smaller batch_size";
  rc.job = "service";
  rc.heartbeat_ms = o.heartbeat_ms;
  rc.handshake_timeout_ms = c.handshake_timeout_ms;
  rc.replays_resume = true;
  auto ring = shm::RingLeader::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("service");
  s->ring_ = std::move(ring).value();
  s->writer_ = std::make_unique<producer::SlotWriter>(s->ring_.get(), slot, "service",
                                                      c.collector);
  s->writer_->SetStages(std::move(stages));
  producer::AdmissionPolicy policy;
  policy.late_join_window = c.late_join_window;
  policy.ring_slots = rc.num_slots;
  policy.join_mid_epoch = c.join_mid_epoch;
  policy.replay_resume = true;  // every position of every epoch can be produced again
  policy.producer_batch = p;
  s->admission_ = std::make_unique<producer::Admission>(s->ring_.get(), policy);
  Service* self = s.get();
  s->ring_->SetStatusProvider([self](shm::StreamStatus* st) {
    st->epoch = self->epoch_.load();
    st->batch_in_epoch = self->batch_.load();
    st->batches_in_epoch = static_cast<uint64_t>(self->plan_.BatchesPerEpoch());
    st->producer_batches = self->produced_.load();
    st->replayed_batches = self->replayed_.load();
    st->idle = self->idle_.load();
    st->resume_replays = static_cast<uint32_t>(self->resume_replays_.load());
    st->resume_replayed_batches = self->resume_replayed_.load();
  });
  // A trial that dies or goes silent is normal for a service (the ring logs it and frees
  // its slots); count it so the stats and the telemetry summary show churn.
  s->ring_->SetLossHandler([self](const shm::MemberInfo&, shm::LossKind kind) {
    if (kind == shm::LossKind::kDetached) {
      self->detached_.fetch_add(1);
      return;
    }
    self->lost_.fetch_add(1);
    if (telemetry::Collector* tc = self->config_.collector)
      tc->Add(telemetry::Counter::kConsumersDetached, 1);
  });
  const int64_t bpe = s->plan_.BatchesPerEpoch();
  BC_LOG(Info, Node, "service: {} samples/epoch, producer batch {}, {} batches/epoch, consumer "
         "batches up to {}, late-join window {} ({} batches), at {}", s->plan_.num_samples(), p,
         bpe, max_b, c.late_join_window,
         producer::LateJoinWindow(c.late_join_window, bpe, rc.num_slots), s->address());
  return s;
}

std::string Service::address() const { return shm::DisplayAddress(config_.socket_name); }

producer::StagingTarget Service::staging_target() {
  return {ring_.get(), config_.socket_name, [this](producer::SlotHook* h) { SetSlotHook(h); }};
}

ServiceStats Service::stats() const {
  ServiceStats s = stats_;
  const producer::WriterStats& w = writer_->stats();
  s.producer_batches = static_cast<int64_t>(produced_.load());
  s.replayed_batches = static_cast<int64_t>(replayed_.load());
  s.skipped_positions = w.empty_positions;
  s.late_joins = admission_->late_joins();
  s.resume_replays = static_cast<int64_t>(resume_replays_.load());
  s.resume_replayed_batches = static_cast<int64_t>(resume_replayed_.load());
  s.max_slot_wait_ns = w.max_slot_wait_ns;
  s.consumers_detached = detached_.load();
  s.consumers_lost = lost_.load();
  return s;
}

void Service::Stop(const std::string& why) {
  stop_.store(true);
  ring_->Fail("service stopped: " + why);
}

void Service::WaitForMembers() {
  idle_.store(1);
  stats_.idle_waits += 1;
  BC_LOG(Info, Node, "service: nobody attached; decoding paused at epoch {} batch {}",
         epoch_.load(), batch_.load());
  admission_->WaitForMembers(stop_);  // woken by a join (or Stop); no polling while idle
  idle_.store(0);
}

Status Service::Run() {
  writer_->RecordStart(source_->threads());
  // Resume (options start_epoch / start_batch): the stream starts there.
  const auto start = static_cast<uint64_t>(config_.options.start_epoch);
  for (uint64_t e = start; config_.epochs == 0 || e < static_cast<uint64_t>(config_.epochs);
       ++e) {
    Status st = RunEpoch(e, e == start ? producer::ResumeFirstBatch(config_.options,
                                                                    plan_.producer_batch())
                                       : 0);
    if (stop_.load()) {
      writer_->ReportSkips();
      return Status::Ok();
    }
    if (!st.ok()) {
      ring_->Fail(st.message());
      return st;
    }
  }
  ring_->End();
  writer_->ReportSkips();
  BC_LOG(Info, Node, "service: {} epochs complete ({} producer batches, {} replayed to late "
         "joiners, {} to {} resuming consumers)", config_.epochs, produced_.load(),
         replayed_.load(), resume_replayed_.load(), resume_replays_.load());
  return Status::Ok();
}

// One epoch of the stream (producer::RunEpochPositions settles membership before every
// position): nobody attached blocks until someone joins (no decoding, no polling).
Status Service::RunEpoch(uint64_t e, int64_t first) {
  epoch_.store(e);
  stats_.epochs_started += 1;
  producer::EpochPolicy policy;
  policy.who = "service";
  policy.first = std::min(first, plan_.BatchesPerEpoch());
  // Late-join replays are the productions not for the shared stream (SharedMask()).
  policy.produce = [&](int64_t k, uint64_t only, const producer::AcquireWait& wait,
                       int64_t next_k) {
    return Produce(e, k, only, wait, next_k,
                   only == admission_->SharedMask() ? nullptr : &replayed_);
  };
  policy.replay = [this](uint64_t epoch, int64_t k, uint64_t only) {
    resume_replays_.store(static_cast<uint64_t>(admission_->resume_replays()));
    return Produce(epoch, k, only, producer::AcquireWait{}, -1, &resume_replayed_);
  };
  policy.idle = [this](int64_t) {
    WaitForMembers();
    return false;
  };
  policy.check_stop = [this] {
    return stop_.load() ? CancelledError("service: stopped") : Status::Ok();
  };
  policy.at_position = [this](int64_t k) { batch_.store(static_cast<uint64_t>(k)); };
  producer::EpochCounts counts;
  bool ended = false;
  return producer::RunEpochPositions(*writer_, *admission_, e, plan_.BatchesPerEpoch(), policy,
                                     &counts, &ended);
}

producer::ProduceRequest Service::Request(uint64_t epoch, int64_t k) {
  producer::ProduceRequest req;
  req.samples = plan_.Batch(epoch, k);
  req.sample = layout_;
  producer::SlotContents& c = req.contents;
  c.epoch = epoch;
  c.batch = k;
  c.batches_in_epoch = plan_.BatchesPerEpoch();
  c.samples_in_epoch = static_cast<uint64_t>(plan_.num_samples());
  return req;
}

Result<std::optional<uint64_t>> Service::Produce(uint64_t epoch, int64_t k, uint64_t only,
                                                 const producer::AcquireWait& wait,
                                                 int64_t next_k,
                                                 std::atomic<uint64_t>* replays) {
  const producer::ProduceRequest req = Request(epoch, k);
  std::optional<producer::ProduceRequest> next;
  if (next_k >= 0) next = Request(epoch, next_k);
  BC_ASSIGN_OR_RETURN(std::optional<uint64_t> receivers,
                      writer_->Produce(*source_, req, only, wait, next ? &*next : nullptr));
  if (receivers) {
    produced_.fetch_add(1);
    if (replays != nullptr) {
      replays->fetch_add(1);
      if (telemetry::Collector* tc = config_.collector)
        tc->Add(telemetry::Counter::kBatchesReplayed, 1);
    }
  }
  return receivers;
}

}  // namespace batchcast::node
