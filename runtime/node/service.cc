// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/service.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "node/leader.h"  // SlotHook
#include "node/slot_fill.h"
#include "telemetry/metrics.h"
#include "transport/shm/carving.h"
#include "transport/shm/control.h"
#include "transport/shm/futex.h"

namespace batchcast::node {
namespace {

uint64_t Align(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

std::string DefaultServiceSocket() { return "batchcast-" + std::to_string(getuid()) + "-service"; }

Service::Service(const ServiceConfig& config, std::unique_ptr<BatchSource> source, int64_t p)
    : config_(config),
      source_(std::move(source)),
      plan_(std::min<int64_t>(source_->num_samples(),
                              config.options.limit_samples > 0 ? config.options.limit_samples
                                                               : source_->num_samples()),
            p, config.options.seed, config.options.shuffle) {}

Service::~Service() {
  if (ring_ == nullptr) return;
  if (!ring_->failed()) ring_->End();
  ring_.reset();  // joins the control thread, whose status provider reads this object
}

Result<std::unique_ptr<Service>> Service::Create(const ServiceConfig& config,
                                                 std::unique_ptr<BatchSource> source) {
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
  if (source->num_samples() <= 0) return InvalidArgumentError("service: the dataset has no samples");
  const uint32_t max_b = config.max_consumer_batch ? config.max_consumer_batch
                                                   : static_cast<uint32_t>(o.batch_size);
  const int64_t p = o.producer_batch > 0 ? o.producer_batch : 2 * int64_t(max_b);
  if (max_b == 0 || p < max_b)
    return InvalidArgumentError("service: producer_batch {} is smaller than the largest consumer "
                                "batch {}; raise producer_batch", p, max_b);
  ServiceConfig c = config;
  if (c.socket_name.empty()) c.socket_name = DefaultServiceSocket();
  std::unique_ptr<Service> s(new Service(c, std::move(source), p));
  s->layout_ = s->source_->MaxLayout();
  // Room for P distinct samples plus the tail any consumer batch <= max_b can need.
  s->capacity_samples_ = uint64_t(p) + 2 * uint64_t(max_b) - 1;
  const uint64_t images = s->capacity_samples_ * s->layout_.bytes();
  s->labels_offset_ = Align(images, 64);
  s->ids_offset_ = Align(s->labels_offset_ + s->capacity_samples_ * sizeof(int64_t), 64);
  shm::RingConfig rc;
  rc.num_slots = static_cast<uint32_t>(o.ring_slots > 0 ? o.ring_slots : o.buffer_depth + 2);
  rc.slot_bytes = Align(s->ids_offset_ + s->capacity_samples_ * sizeof(int64_t), 4096);
  rc.max_consumer_batch = max_b;
  rc.producer_batch = static_cast<uint32_t>(p);
  rc.epoch_samples = static_cast<uint64_t>(s->plan_.num_samples());
  rc.socket_name = c.socket_name;
  rc.job = "service";
  rc.heartbeat_ms = o.heartbeat_ms;
  rc.handshake_timeout_ms = c.handshake_timeout_ms;
  auto ring = shm::RingLeader::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("service");
  s->ring_ = std::move(ring).value();
  Service* self = s.get();
  s->ring_->SetStatusProvider([self](shm::StreamStatus* st) {
    st->epoch = self->epoch_.load();
    st->batch_in_epoch = self->batch_.load();
    st->batches_in_epoch = static_cast<uint64_t>(self->plan_.BatchesPerEpoch());
    st->producer_batches = self->produced_.load();
    st->replayed_batches = self->replayed_.load();
    st->idle = self->idle_.load();
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
  BC_LOG(Info, Node, "service: {} samples/epoch, producer batch {}, {} batches/epoch, consumer "
         "batches up to {}, late-join window {}, at {}", s->plan_.num_samples(), p,
         s->plan_.BatchesPerEpoch(), max_b, c.late_join_window, s->address());
  return s;
}

std::string Service::address() const { return shm::DisplayAddress(config_.socket_name); }

ServiceStats Service::stats() const {
  ServiceStats s = stats_;
  s.max_slot_wait_ns = max_slot_wait_ns_.load();
  s.consumers_detached = detached_.load();
  s.consumers_lost = lost_.load();
  return s;
}

void Service::Stop(const std::string& why) {
  stop_.store(true);
  ring_->Fail("service stopped: " + why);
}

uint64_t Service::MaskOf(shm::MemberState state) const { return ring_->MemberMask(state); }

void Service::WaitForMembers() {
  idle_.store(1);
  stats_.idle_waits += 1;
  BC_LOG(Info, Node, "service: nobody attached; decoding paused at epoch {} batch {}",
         epoch_.load(), batch_.load());
  // Woken by a join (or the stream failing on Stop); no polling while idle.
  while (!stop_.load() && MaskOf(shm::MemberState::kJoining) == 0 &&
         MaskOf(shm::MemberState::kActive) == 0) {
    Status st = ring_->WaitForJoined(1, 3600 * 1000);
    if (st.code() == StatusCode::kUnavailable) break;
  }
  idle_.store(0);
}

Status Service::Run() {
  for (uint64_t e = 0; config_.epochs == 0 || e < static_cast<uint64_t>(config_.epochs); ++e) {
    Status st = RunEpoch(e);
    if (stop_.load()) return Status::Ok();
    if (!st.ok()) {
      ring_->Fail(st.message());
      return st;
    }
  }
  ring_->End();
  BC_LOG(Info, Node, "service: {} epochs complete ({} producer batches, {} replayed)",
         config_.epochs, stats_.producer_batches, stats_.replayed_batches);
  return Status::Ok();
}

// One epoch of the stream. Each position first settles membership:
//   - at the epoch's first batch every joiner is admitted;
//   - nobody attached: block until someone joins (no decoding, no polling);
//   - nobody receiving now (only joiners waiting for the next epoch): the rest of this
//     epoch is skipped with empty positions, so a newcomer to an idle service starts at
//     once with a full epoch;
//   - a joiner within the late-join window: the positions before it are re-produced for
//     it alone (the others are held meanwhile), then everyone continues together;
//   - a later joiner: admitted from the next epoch's first position (or at once with
//     join_mid_epoch).
Status Service::RunEpoch(uint64_t e) {
  const int64_t bpe = plan_.BatchesPerEpoch();
  epoch_.store(e);
  stats_.epochs_started += 1;
  int64_t k = 0;
  while (k < bpe) {
    if (stop_.load()) return CancelledError("service: stopped");
    batch_.store(static_cast<uint64_t>(k));
    const uint64_t seq = ring_->next_seq();
    if (k == 0) ring_->AdmitJoiningMask(seq);
    const uint64_t joining = MaskOf(shm::MemberState::kJoining);
    const uint64_t active = MaskOf(shm::MemberState::kActive);
    const uint64_t now = ring_->ReceiverMask(seq);
    if (joining == 0 && active == 0) {
      WaitForMembers();
      continue;
    }
    if (now == 0) {  // only joiners or members waiting for a later epoch
      BC_RETURN_IF_ERROR(Produce(e, k, 0, /*fill=*/false));
      ++k;
      continue;
    }
    if (joining != 0 && k > 0) {
      if (double(k) <= config_.late_join_window * double(bpe)) {
        const uint64_t got = ring_->AdmitJoiningMask(seq, joining);
        BC_LOG(Info, Node, "service: late join at epoch {} batch {}: replaying {} batches to "
               "consumers 0x{:x} while the others wait", e, k, k, got);
        stats_.late_joins += __builtin_popcountll(got);
        for (int64_t j = 0; j < k && got != 0; ++j) {
          BC_RETURN_IF_ERROR(Produce(e, j, got, /*fill=*/true));
          stats_.replayed_batches += 1;
          replayed_.fetch_add(1);
        }
        continue;  // settle membership again at the same k
      }
      const uint64_t start = config_.join_mid_epoch ? seq : seq + uint64_t(bpe - k);
      ring_->AdmitJoiningMask(start, joining);
    }
    bool interrupted = false;
    BC_RETURN_IF_ERROR(Produce(e, k, ~0ULL, /*fill=*/true, &interrupted));
    if (interrupted) continue;  // a joiner arrived while every slot was held: settle it first
    ++k;
  }
  return Status::Ok();
}

Status Service::Produce(uint64_t epoch, int64_t k, uint64_t only, bool fill, bool* interrupted) {
  // An interrupted wait for this position continues to count (max_slot_wait_ns).
  const int64_t t0 = wait_since_ns_ != 0 ? wait_since_ns_ : shm::MonotonicNs();
  Result<shm::SlotWrite> acquired = UnavailableError("service: no slot");
  for (;;) {
    // Wake now and then while consumers hold every slot: a joiner must be admitted even
    // while the others train slowly (it would otherwise time out waiting for admission).
    acquired = ring_->AcquireSlot(200);
    if (acquired.ok() || acquired.status().code() != StatusCode::kDeadlineExceeded) break;
    if (interrupted != nullptr && MaskOf(shm::MemberState::kJoining) != 0) {
      *interrupted = true;  // nothing acquired or published
      wait_since_ns_ = t0;
      return Status::Ok();
    }
  }
  if (!acquired.ok()) return acquired.status();
  const shm::SlotWrite w = *acquired;
  const int64_t waited = shm::MonotonicNs() - t0;
  wait_since_ns_ = 0;
  if (waited > max_slot_wait_ns_.load()) max_slot_wait_ns_.store(waited);
  if (!fill) {
    w.desc->epoch = epoch;
    w.desc->batch_in_epoch = static_cast<uint64_t>(k);
    ring_->Publish(w, 0);
    stats_.skipped_positions += 1;
    return Status::Ok();
  }
  if (slot_hook_ != nullptr) BC_RETURN_IF_ERROR(slot_hook_->BeforeFill(w));
  std::span<const int64_t> samples = plan_.Batch(epoch, k);
  auto* labels = reinterpret_cast<int64_t*>(w.data + labels_offset_);
  auto* ids = reinterpret_cast<int64_t*>(w.data + ids_offset_);
  pipeline::BatchRequest req;
  req.epoch = epoch;
  req.samples = samples;
  req.images = w.data;
  req.labels = labels;
  pipeline::BatchResult result;
  Status st = source_->Fill(req, &result);
  if (!st.ok()) return st.WithContext(fmt::format("service: epoch {} producer batch {}", epoch, k));
  const uint32_t n = static_cast<uint32_t>(result.written);
  if (result.kept.size() == n) std::copy(result.kept.begin(), result.kept.end(), ids);
  else std::copy(samples.begin(), samples.begin() + n, ids);
  SlotContents c;
  c.epoch = epoch;
  c.batch = k;
  c.batches_in_epoch = plan_.BatchesPerEpoch();
  c.samples_in_epoch = static_cast<uint64_t>(plan_.num_samples());
  c.num_samples = n;
  c.skipped = static_cast<uint32_t>(result.skipped.size());
  c.layout = layout_;
  c.labels_offset = labels_offset_;
  c.ids_offset = ids_offset_;
  c.capacity_samples = capacity_samples_;
  const uint32_t tail = TailForReceivers(*ring_, w.seq, only, c);
  BC_RETURN_IF_ERROR(CompleteSlot(w, tail, c).WithContext("service"));
  if (slot_hook_ != nullptr) BC_RETURN_IF_ERROR(slot_hook_->BeforePublish(w));
  const uint64_t sb = layout_.bytes();
  const int64_t t_pub = shm::MonotonicNs();
  const uint64_t receivers = ring_->Publish(w, only);
  if (telemetry::Collector* tc = config_.collector) {  // as node::Leader records
    using telemetry::Counter, telemetry::Timer, telemetry::Gauge, telemetry::SpanKind;
    const int64_t now = shm::MonotonicNs();
    tc->Add(Counter::kBatchesProduced, 1);
    tc->Add(Counter::kSamplesProduced, n);
    tc->Add(Counter::kSamplesSkipped, static_cast<int64_t>(result.skipped.size()));
    tc->Add(Counter::kBytesShm, static_cast<int64_t>((n + uint64_t(tail)) * sb));
    tc->AddTime(Timer::kRead, result.read_ns);
    tc->AddTime(Timer::kDecode, result.decode_ns);
    tc->AddTime(Timer::kTransform, result.transform_ns);
    tc->AddTime(Timer::kPublish, now - t_pub);
    tc->Span(SpanKind::kPublish, w.seq, t_pub, now);
    tc->SetGauge(Gauge::kRingSlots, ring_->config().num_slots);
    tc->SetGauge(Gauge::kWorkerThreads, source_->threads());
    tc->SetGauge(Gauge::kRingOccupancy, ring_->OccupiedSlots());
    tc->SetGauge(Gauge::kConsumersAttached, __builtin_popcountll(receivers));
  }
  stats_.producer_batches += 1;
  produced_.fetch_add(1);
  for (size_t i = 0; i < result.skipped.size(); ++i)
    BC_LOG(Warn, Node, "service: skipped sample {}: {}", result.skipped[i],
           i < result.skip_reasons.size() ? result.skip_reasons[i] : "bad sample");
  return Status::Ok();
}

}  // namespace batchcast::node
