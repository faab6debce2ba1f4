// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/slot_writer.h"

#include <algorithm>

#include "core/errors.h"
#include "core/log.h"
#include "producer/view_groups.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "transport/shm/futex.h"

namespace batchcast::producer {

SlotWriter::SlotWriter(shm::RingLeader* ring, const SlotLayout& layout, std::string who,
                       telemetry::Collector* collector)
    : ring_(ring), layout_(layout), who_(std::move(who)), collector_(collector) {
  if (collector_ == nullptr) return;
  // The per-trial ledger (telemetry/trial_ledger.h): who was admitted, who left and how.
  telemetry::Collector* tc = collector_;
  ring_->SetMemberObserver([tc](const shm::MemberInfo& m, const shm::LossKind* lost) {
    if (lost == nullptr) {
      tc->trials().Admit(m.id, m.pid, m.rank, m.name, tc->ElapsedS());
      return;
    }
    using telemetry::TrialEnd;
    const TrialEnd how = *lost == shm::LossKind::kDetached    ? TrialEnd::kDetached
                         : *lost == shm::LossKind::kHeartbeat ? TrialEnd::kSilent
                                                              : TrialEnd::kDied;
    tc->trials().Leave(m.id, how, tc->ElapsedS());
  });
}

void SlotWriter::SetHook(SlotHook* hook) {
  hook_ = hook;
  if (hook != nullptr && groups_ != nullptr)
    groups_->RefuseViews("the GPU data plane stages the leader's view only");
}

void SlotWriter::RecordStart(int worker_threads) {
  if (collector_ == nullptr) return;
  collector_->SetGauge(telemetry::Gauge::kRingSlots, ring_->config().num_slots);
  collector_->SetGauge(telemetry::Gauge::kWorkerThreads, worker_threads);
}

Result<std::optional<shm::SlotWrite>> SlotWriter::Acquire(uint64_t seq, const AcquireWait& wait) {
  BC_ASSIGN_OR_RETURN(std::optional<shm::SlotWrite> w, AcquireSlot(seq, wait));
  if (w && hook_ != nullptr) BC_RETURN_IF_ERROR(hook_->BeforeFill(*w));
  return w;
}

Result<std::optional<shm::SlotWrite>> SlotWriter::AcquireSlot(uint64_t seq,
                                                              const AcquireWait& wait) {
  const int64_t t0 = wait_since_ns_ != 0 ? wait_since_ns_ : shm::MonotonicNs();
  wait_since_ns_ = 0;
  Result<shm::SlotWrite> acquired = UnavailableError("{}: no slot", who_);
  for (;;) {
    const int64_t poll = wait.poll_ms ? wait.poll_ms() : -1;
    acquired = ring_->AcquireSlotAt(seq, wait.on_timeout ? poll : -1);
    if (acquired.ok() || acquired.status().code() != StatusCode::kDeadlineExceeded ||
        !wait.on_timeout)
      break;
    BC_ASSIGN_OR_RETURN(bool give_up, wait.on_timeout());
    if (give_up) {
      wait_since_ns_ = t0;  // the next Acquire continues this wait
      return std::optional<shm::SlotWrite>();
    }
  }
  const int64_t waited = shm::MonotonicNs() - t0;
  if (collector_ != nullptr) collector_->AddTime(telemetry::Timer::kSlotWait, waited);
  stats_.slot_wait_ns += waited;
  stats_.max_slot_wait_ns = std::max(stats_.max_slot_wait_ns, waited);
  if (!acquired.ok()) return acquired.status().WithContext(who_);
  return std::optional<shm::SlotWrite>(*acquired);
}

void SlotWriter::StartFill(BatchSource& source, uint64_t epoch, int image_size,
                           std::span<const int64_t> samples, const pipeline::SampleLayout& sample,
                           uint8_t* data, int64_t pos, BatchRecord* record,
                           std::span<const GroupRegion> groups) {
  pipeline::BatchRequest req;
  req.epoch = epoch;
  req.samples = samples;
  req.image_size = image_size;
  req.images = data + uint64_t(pos) * sample.bytes();
  req.labels = layout_.labels(data) + pos;
  std::vector<pipeline::GroupTarget> targets;  // the source copies them at Start
  for (const GroupRegion& r : groups)
    targets.push_back({r.source_view, r.group == 0 ? image_size : r.image_size,
                       data + r.offset + uint64_t(pos) * r.sample.bytes()});
  if (!targets.empty()) {
    req.images = nullptr;
    req.image_size = 0;
    req.groups = targets;
  }
  if (record->produce_start_ns == 0) record->produce_start_ns = shm::MonotonicNs();
  if (stream_start_ns_ == 0) {
    stream_start_ns_ = record->produce_start_ns;
    idle_at_start_ns_ = source.idle_ns();
  }
  source.Start(req);
}

Status SlotWriter::FinishFill(BatchSource& source, uint64_t epoch,
                              std::span<const int64_t> samples, uint8_t* data, int64_t pos,
                              BatchRecord* record, uint32_t* written) {
  pipeline::BatchResult result;
  const int64_t t0 = shm::MonotonicNs();
  Status st = source.Finish(&result);
  const int64_t t1 = shm::MonotonicNs();
  // The producer thread waited for the workers' queued batch: a wait, not decode time.
  if (collector_ != nullptr) collector_->AddTime(telemetry::Timer::kQueueWait, t1 - t0);
  int64_t* ids = layout_.ids(data) + pos;
  const size_t n = st.ok() ? std::min(size_t(result.written), samples.size()) : 0;
  if (result.kept.size() == n) std::copy(result.kept.begin(), result.kept.begin() + n, ids);
  else std::copy(samples.begin(), samples.begin() + n, ids);
  std::fill(ids + n, ids + samples.size(), int64_t(-1));
  record->produce_end_ns = t1;
  record->read_ns += result.read_ns;
  record->read_lock_ns += result.read_lock_ns;
  record->decode_ns += result.decode_ns;
  record->transform_ns += result.transform_ns;
  record->skipped += static_cast<int64_t>(result.skipped.size());
  record->cache_hits += result.cache_hits;
  record->cache_misses += result.cache_misses;
  record->cache_bytes = std::max(record->cache_bytes, result.cache_bytes);
  record->decodes += result.decodes;
  record->decoded_samples += static_cast<int64_t>(samples.size());
  if (record->group_transform_ns.size() != result.group_transform_ns.size())
    record->group_transform_ns.assign(result.group_transform_ns.size(), 0);
  for (size_t g = 0; g < result.group_transform_ns.size(); ++g)
    record->group_transform_ns[g] += result.group_transform_ns[g];
  stats_.fill_ns += t1 - t0;
  stats_.samples_decoded += static_cast<int64_t>(samples.size());
  stats_.samples_skipped += static_cast<int64_t>(result.skipped.size());
  skips_.AddSkips(epoch, result, who_);
  *written = static_cast<uint32_t>(n);
  return st;
}

Status SlotWriter::Fill(BatchSource& source, uint64_t epoch, int image_size,
                        std::span<const int64_t> samples, const pipeline::SampleLayout& sample,
                        uint8_t* data, int64_t pos, BatchRecord* record, uint32_t* written) {
  *written = 0;
  if (samples.empty()) return Status::Ok();
  if (ahead_)
    return InternalError("{}: a fill while a look-ahead fill is in flight (producer bug)", who_);
  StartFill(source, epoch, image_size, samples, sample, data, pos, record);
  return FinishFill(source, epoch, samples, data, pos, record, written);
}

void SlotWriter::SetStages(std::vector<std::unique_ptr<BatchStage>> stages) {
  stages_ = std::move(stages);
  images_dropped_ = StagesDrop(stages_, "images");
  published_tensors_.clear();
  for (const TensorSlot& t : layout_.tensors)
    if (!StagesDrop(stages_, t.spec.name)) published_tensors_.push_back(t);
}

Status SlotWriter::RunStages(const shm::SlotWrite& w, const SlotContents& c) {
  if (stages_.empty() || c.num_samples == 0) return Status::Ok();
  const int64_t t0 = shm::MonotonicNs();
  int64_t copied = 0;
  for (const auto& stage : stages_) {
    BC_RETURN_IF_ERROR(stage->Run({w.data, &layout_, c.layout, c.num_samples}).WithContext(who_));
    copied += stage->copied_bytes();
  }
  const int64_t ns = shm::MonotonicNs() - t0;
  stats_.stage_runs += static_cast<int64_t>(stages_.size());
  stats_.stage_ns += ns;
  stats_.stage_copied_bytes = copied;  // each stage counts from the start
  if (collector_ != nullptr) collector_->AddTime(telemetry::Timer::kStage, ns);
  return Status::Ok();
}

Result<uint64_t> SlotWriter::Publish(const shm::SlotWrite& w, SlotContents c, uint64_t only,
                                     const BatchRecord& record) {
  c.labels_offset = layout_.labels_offset;
  c.ids_offset = layout_.ids_offset;
  c.capacity_samples = layout_.capacity_samples;
  c.images_bytes = layout_.images_bytes;
  c.tensors = layout_.tensors;
  BC_RETURN_IF_ERROR(RunStages(w, c));
  if (!stages_.empty()) c.tensors = published_tensors_;
  if (images_dropped_) {  // read by a stage only: 0 bytes per image for the consumers
    if (c.image_size == 0) c.image_size = c.layout.height;
    c.layout = pipeline::SampleLayout{};
  }
  const uint32_t tail = TailForReceivers(*ring_, w.seq, only, c);
  BC_RETURN_IF_ERROR(CompleteSlot(w, tail, c).WithContext(who_));
  if (hook_ != nullptr) BC_RETURN_IF_ERROR(hook_->BeforePublish(w));
  // The view groups' receivers, counted before they may take the batch and leave.
  std::map<uint32_t, int> members;
  if (!c.groups.empty() && collector_ != nullptr)
    for (const shm::MemberInfo& m : ring_->Receivers(w.seq))
      if ((only & shm::RingLeader::MemberBit(m.id)) != 0) members[m.group] += 1;
  const int64_t t0 = shm::MonotonicNs();
  const uint64_t receivers = ring_->Publish(w, only);
  const int64_t t1 = shm::MonotonicNs();
  stats_.producer_batches += 1;
  stats_.samples_produced += c.num_samples;
  skips_.AddPublished(c.epoch, c.num_samples);
  stats_.tail_copies += tail;
  if (receivers == 0) stats_.dropped_batches += 1;
  Record(w, c, tail, record, t0, t1, receivers);
  if (!c.groups.empty()) RecordViews(c, record, members);
  return receivers;
}

Status SlotWriter::PublishEmpty(uint64_t epoch, int64_t batch) {
  bool filling = false;
  BatchRecord unused;
  BC_ASSIGN_OR_RETURN(std::optional<shm::SlotWrite> acquired,
                      TakeSlot(nullptr, {}, &filling, &unused));
  const shm::SlotWrite& w = *acquired;
  w.desc->epoch = epoch;
  w.desc->batch_in_epoch = static_cast<uint64_t>(batch);
  ring_->Publish(w, 0);
  stats_.empty_positions += 1;
  return Status::Ok();
}

SlotWriter::~SlotWriter() { DrainLookahead(); }

void SlotWriter::DrainLookahead() {
  if (!ahead_) return;
  pipeline::BatchResult dropped;
  (void)ahead_->source->Finish(&dropped);  // its errors belong to a position not produced
  ahead_.reset();
}

namespace {

bool SameRegion(const GroupRegion& a, const GroupRegion& b) {
  return a.group == b.group && a.view_key == b.view_key && a.source_view == b.source_view &&
         a.offset == b.offset && a.sample.bytes() == b.sample.bytes() &&
         a.image_size == b.image_size;
}

bool SameBatch(const ProduceRequest& a, const ProduceRequest& b) {
  return a.contents.epoch == b.contents.epoch && a.contents.batch == b.contents.batch &&
         a.image_size == b.image_size && a.sample.bytes() == b.sample.bytes() &&
         std::equal(a.samples.begin(), a.samples.end(), b.samples.begin(), b.samples.end()) &&
         std::equal(a.groups.begin(), a.groups.end(), b.groups.begin(), b.groups.end(),
                    SameRegion);
}

}  // namespace

Result<std::optional<shm::SlotWrite>> SlotWriter::TakeSlot(const ProduceRequest* request,
                                                           const AcquireWait& wait,
                                                           bool* filling, BatchRecord* record) {
  *filling = false;
  if (!ahead_) {  // nothing is filling: a wait here is the consumers' backpressure
    const int64_t t0 = shm::MonotonicNs();
    auto w = Acquire(ring_->next_seq(), wait);
    if (stream_start_ns_ != 0) stats_.starved_wait_ns += shm::MonotonicNs() - t0;
    return w;
  }
  if (ahead_->w.seq != ring_->next_seq())
    return InternalError("{}: look-ahead slot for position {} but the next is {} (producer bug)",
                         who_, ahead_->w.seq, ring_->next_seq());
  const shm::SlotWrite w = ahead_->w;
  if (request != nullptr && ahead_->source != nullptr && SameBatch(ahead_->request, *request)) {
    *filling = true;
    *record = ahead_->record;
    ahead_.reset();
    return std::optional<shm::SlotWrite>(w);
  }
  stats_.lookahead_dropped += 1;
  DrainLookahead();  // the slot stays acquired for this position
  return std::optional<shm::SlotWrite>(w);
}

Status SlotWriter::TryLookahead(BatchSource& source, const ProduceRequest& next, bool* started) {
  *started = false;
  if (ring_->config().num_slots < 2 || next.samples.empty()) return Status::Ok();
  Result<shm::SlotWrite> got = ring_->AcquireSlotAt(ring_->next_seq() + 1, 0);
  if (!got.ok()) return Status::Ok();  // nothing free now (or the ring failed: Publish says)
  if (hook_ != nullptr) BC_RETURN_IF_ERROR(hook_->BeforeFill(*got));
  ahead_.emplace();
  ahead_->w = *got;
  ahead_->source = &source;
  ahead_->samples.assign(next.samples.begin(), next.samples.end());
  ahead_->request = next;
  ahead_->request.samples = ahead_->samples;
  StartFill(source, next.contents.epoch, next.image_size, ahead_->samples, next.sample,
            got->data, 0, &ahead_->record, ahead_->request.groups);
  stats_.lookahead_batches += 1;
  *started = true;
  return Status::Ok();
}

Result<ProduceRequest> SlotWriter::WithGroups(const ProduceRequest& request, uint64_t seq,
                                              uint64_t only) {
  ProduceRequest r = request;
  if (groups_ == nullptr) return r;
  BC_ASSIGN_OR_RETURN(r.groups, groups_->RegionsFor(ring_->Receivers(seq), only, r.sample,
                                                     r.contents.epoch));
  return r;
}

Result<std::optional<uint64_t>> SlotWriter::Produce(BatchSource& source,
                                                    const ProduceRequest& given, uint64_t only,
                                                    const AcquireWait& wait,
                                                    const ProduceRequest* given_next) {
  // The groups of this position's receivers (membership is settled for it); the look-ahead
  // guesses the next position has the same receivers (else it is dropped and filled again).
  BC_ASSIGN_OR_RETURN(const ProduceRequest request, WithGroups(given, ring_->next_seq(), only));
  // (at its own epoch: a view's schedule may change size there).
  std::optional<ProduceRequest> next_groups;
  if (given_next != nullptr) {
    BC_ASSIGN_OR_RETURN(next_groups, WithGroups(*given_next, ring_->next_seq(), only));
  }
  const ProduceRequest* next = next_groups ? &*next_groups : nullptr;
  BatchRecord record;
  bool filling = false;
  BC_ASSIGN_OR_RETURN(std::optional<shm::SlotWrite> acquired,
                      TakeSlot(&request, wait, &filling, &record));
  if (!acquired) return std::optional<uint64_t>();
  const shm::SlotWrite w = *acquired;
  const SlotContents& c = request.contents;
  if (!filling && !request.samples.empty())
    StartFill(source, c.epoch, request.image_size, request.samples, request.sample, w.data, 0,
              &record, request.groups);
  // While this batch fills, take the next position's slot as soon as one is free.
  const bool look = next != nullptr && source.overlaps() && !request.samples.empty();
  bool started = !look;
  Status ahead_st;
  while (!started && ahead_st.ok()) {
    ahead_st = TryLookahead(source, *next, &started);
    if (!started && source.WaitOldest(1)) break;  // filled: publish, the next Produce waits
  }
  uint32_t n = 0;
  Status st = request.samples.empty()
                  ? Status::Ok()
                  : FinishFill(source, c.epoch, request.samples, w.data, 0, &record, &n);
  BC_RETURN_IF_ERROR(ahead_st);  // (after the fill: nothing writes a slot once we return)
  if (!st.ok())
    return st.WithContext(fmt::format("{}: epoch {} producer batch {}", who_, c.epoch, c.batch));
  SlotContents contents = c;
  contents.num_samples = n;
  contents.skipped = static_cast<uint32_t>(record.skipped);
  contents.layout = request.sample;
  contents.groups = request.groups;
  BC_ASSIGN_OR_RETURN(uint64_t receivers, Publish(w, contents, only, record));
  stats_.stream_ns = shm::MonotonicNs() - stream_start_ns_;
  stats_.source_idle_ns = source.idle_ns() - idle_at_start_ns_;
  return std::optional<uint64_t>(receivers);
}

void SlotWriter::Record(const shm::SlotWrite& w, const SlotContents& c, uint32_t tail,
                        const BatchRecord& r, int64_t t_pub, int64_t t_end, uint64_t receivers) {
  telemetry::Collector* tc = collector_;
  if (tc == nullptr) return;
  using telemetry::Counter, telemetry::Timer, telemetry::Gauge, telemetry::SpanKind;
  tc->Add(Counter::kBatchesProduced, 1);
  tc->Add(Counter::kSamplesProduced, c.num_samples);
  tc->Add(Counter::kSamplesSkipped, r.skipped);
  uint64_t sample_bytes = c.groups.empty() ? c.layout.bytes() : 0;  // over the view groups
  for (const GroupRegion& g : c.groups) sample_bytes += g.sample.bytes();
  const auto bytes = static_cast<int64_t>((c.num_samples + uint64_t(tail)) * sample_bytes);
  tc->Add(Counter::kBytesShm, bytes);
  tc->trials().Deliver(receivers, c.num_samples, bytes, c.epoch, tc->ElapsedS());
  tc->AddTime(Timer::kRead, r.read_ns);
  tc->AddTime(Timer::kLockWait, r.read_lock_ns);
  tc->AddTime(Timer::kDecode, r.decode_ns);
  tc->AddTime(Timer::kTransform, r.transform_ns);
  if (r.cache_hits + r.cache_misses > 0) {
    tc->Add(Counter::kCacheHits, r.cache_hits);
    tc->Add(Counter::kCacheMisses, r.cache_misses);
    tc->SetGauge(Gauge::kCacheBytes, r.cache_bytes);
  }
  if (r.produce_start_ns != 0) {
    tc->AddTime(Timer::kCollate, t_pub - r.produce_end_ns);  // tail, descriptor, hook
    tc->Span(SpanKind::kProduce, w.seq, r.produce_start_ns, r.produce_end_ns);
  }
  tc->AddTime(Timer::kPublish, t_end - t_pub);
  tc->Span(SpanKind::kPublish, w.seq, t_pub, t_end);
  tc->SetGauge(Gauge::kRingOccupancy, ring_->OccupiedSlots());
  tc->SetGauge(Gauge::kConsumersAttached, __builtin_popcountll(receivers));
  if (c.scale_den != 0) {  // progressive resizing: size, batch and LR factor over time
    tc->SetGauge(Gauge::kImageSize, c.image_size);
    tc->SetGauge(Gauge::kBatchSize, c.num_samples);
    tc->SetGauge(Gauge::kLrFactor, c.lr_factor);
  }
}

void SlotWriter::RecordViews(const SlotContents& c, const BatchRecord& r,
                             std::map<uint32_t, int>& members) {
  const auto groups = static_cast<int64_t>(c.groups.size());
  stats_.view_samples += r.decoded_samples;
  stats_.view_decodes += r.decodes;
  // A leader per view decodes each sample it decodes at all once (0 for raw samples and
  // cache hits, as here): the decodes made here for the first group, times the groups.
  const int64_t per_view = r.decodes > 0 ? r.decoded_samples - r.cache_hits : 0;
  stats_.view_decodes_one_leader_per_view += per_view * groups;
  telemetry::Collector* tc = collector_;
  if (tc == nullptr) return;
  auto record = [&](const std::string& name, double v) {
    Status st = tc->Record(name, v);
    if (!st.ok()) BC_LOG(Warn, Node, "{}: telemetry: {}", who_, st.message());
  };
  for (size_t i = 0; i < c.groups.size(); ++i) {
    const GroupRegion& g = c.groups[i];
    const std::string key = fmt::format("views/{:016x}", g.view_key);
    auto [it, fresh] = view_totals_.try_emplace(g.view_key);
    if (fresh)
      tc->Annotate(fmt::format("view {:016x}: {} (first made as view group {}; series {}/...)",
                               g.view_key, groups_ != nullptr ? groups_->ViewOfKey(g.view_key) : "",
                               g.group, key));
    it->second.samples += c.num_samples;
    if (i < r.group_transform_ns.size()) it->second.transform_ns += r.group_transform_ns[i];
    record(key + "/members", members[g.group]);
    record(key + "/samples", double(it->second.samples));
    record(key + "/transform_ns", double(it->second.transform_ns));
    record(key + "/image_size", double(g.sample.height));  // a view's schedule changes it
  }
  record("views/decodes", double(stats_.view_decodes));
  record("views/decodes_one_leader_per_view", double(stats_.view_decodes_one_leader_per_view));
}

}  // namespace batchcast::producer
