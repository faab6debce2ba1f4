// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/multinode_leader.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "node/multinode_plan.h"
#include "producer/slot_layout.h"
#include "telemetry/collector.h"
#include "transport/mpi/mpi_status.h"
#include "transport/shm/futex.h"

namespace batchcast::node {

MultinodeLeader::MultinodeLeader(const LeaderConfig& config,
                                 std::unique_ptr<producer::BatchSource> source,
                                 const MultinodeConfig& multi, int64_t producer_batch,
                                 int64_t num_samples)
    : config_(config),
      multi_(multi),
      source_(std::move(source)),
      plan_(num_samples, producer_batch, config.options.seed, config.options.shuffle) {}

Result<std::unique_ptr<MultinodeLeader>> MultinodeLeader::Create(
    const LeaderConfig& config, std::unique_ptr<producer::BatchSource> source,
    const MultinodeConfig& multi) {
  const Options& o = config.options;
  if (!o.resize.empty())
    return InvalidArgumentError(
        "multinode leader: progressive resizing ('resize') is not supported across nodes yet; "
        "unset it or run on one node");
  const bool shard = multi.mode == MultinodeMode::kShard;
  Options sizing = o;
  if (shard) sizing.producer_batch = 0;  // shard: the global batch T x b is the plan's batch
  BC_ASSIGN_OR_RETURN(producer::BatchSizes sizes,
                      producer::ResolveBatchSizes(sizing, config.max_consumer_batch,
                                                  "multinode leader"));
  const uint32_t max_b = sizes.max_consumer_batch;
  int64_t n = source->num_samples();
  if (o.limit_samples > 0) n = std::min(n, o.limit_samples);
  if (n <= 0) return InvalidArgumentError("multinode leader: the dataset has no samples");
  if (shard && multi.total_trainers <= 0)
    return InvalidArgumentError("multinode leader: shard mode needs the number of trainers");
  // Shard: the stream plan's "producer batch" is the global batch T x b; a slot holds one
  // trainer's part (<= b). Replicate: the usual producer batch.
  const int64_t p = shard ? int64_t(multi.total_trainers) * max_b : sizes.producer_batch;
  std::unique_ptr<MultinodeLeader> l(new MultinodeLeader(config, std::move(source), multi, p, n));
  l->layout_ = l->source_->MaxLayout();
  const int64_t slot_samples = shard ? int64_t(max_b) : p;
  producer::SlotLayout slot = producer::ComputeSlotLayout(slot_samples, max_b, l->layout_);
  std::vector<std::unique_ptr<producer::BatchStage>> stages;
  BC_RETURN_IF_ERROR(producer::PrepareStages(o.stage, l->layout_, {}, slot_samples, o.threads,
                                             "multinode leader", &slot, &stages));
  int slots = static_cast<int>(producer::RingSlots(o));
  // Shard: each local trainer holds its own slots; give each room for buffer_depth + 2.
  if (shard) slots = std::max(slots, config.expected_consumers * (o.buffer_depth + 2));
  // Consumers derive BatchesPerEpoch from the epoch samples: shard = one part per global batch.
  const uint64_t epoch_samples =
      shard ? uint64_t(GlobalBatchesPerEpoch(n, multi.total_trainers, static_cast<int>(max_b))) *
                  max_b
            : uint64_t(n);
  shm::RingConfig rc = producer::RingConfigFor(slot, static_cast<uint32_t>(slots), max_b,
                                               static_cast<uint64_t>(slot_samples), epoch_samples,
                                               o.epochs);
  rc.socket_name = config.socket_name;
  rc.job = config.job;
  rc.rank = config.rank;
  rc.heartbeat_ms = o.heartbeat_ms;
  auto ring = shm::RingLeader::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("multinode leader");
  l->ring_ = std::move(ring).value();
  l->writer_ = std::make_unique<producer::SlotWriter>(l->ring_.get(), slot, "multinode leader",
                                                      config.collector);
  l->writer_->SetStages(std::move(stages));
  producer::AdmissionPolicy policy;
  policy.late_join_window = 0;  // no replay: every node publishes the same positions
  policy.ring_slots = rc.num_slots;
  l->admission_ = std::make_unique<producer::Admission>(l->ring_.get(), policy);
  if (shard)
    BC_LOG(Info, Node, "multinode leader (shard): {} samples/epoch, {} trainers x b={} = global "
           "batch {}, {} local trainers, {} slots of {} MiB", n, multi.total_trainers, max_b, p,
           multi.trainer_index.size(), slots, rc.slot_bytes >> 20);
  else
    BC_LOG(Info, Node, "multinode leader (replicate): node {} of {}, {} samples/epoch, producer "
           "batch {}, share ~{}, up to {} batches' exchanges in flight, {} slots of {} MiB",
           multi.node_index, multi.num_nodes, n, p, p / multi.num_nodes,
           std::max(1, std::min(multi.exchange_depth, slots - 1)), slots, rc.slot_bytes >> 20);
  return l;
}

MultinodeStats MultinodeLeader::stats() const {
  MultinodeStats s = stats_;
  static_cast<producer::WriterStats&>(s) = writer_->stats();
  return s;
}

void MultinodeLeader::Abort(const std::string& why) {
  abort_.Set(why);
  ring_->Fail(why);
}

Status MultinodeLeader::Run() {
  if (config_.expected_consumers > 0) {
    Status st = ring_->WaitForJoined(config_.expected_consumers, config_.join_timeout_ms);
    if (!st.ok()) {
      if (multi_.mode == MultinodeMode::kReplicate) {
        bool go = false;
        Agree(st, &go).IgnoreError();  // let the other leaders fail instead of hanging
      }
      ring_->Fail(st.message());
      return st;
    }
  }
  admission_->AdmitJoiners(ring_->next_seq(), 0, 1);
  writer_->RecordStart(source_->threads());
  Status st = multi_.mode == MultinodeMode::kShard ? RunShard() : RunReplicate();
  if (!st.ok()) {
    ring_->Fail(st.message());
    return st;
  }
  ring_->End();
  writer_->ReportSkips();
  const MultinodeStats s = stats();
  BC_LOG(Info, Node, "multinode leader: stream complete: {} slots, {} samples published, {} "
         "decoded here, {} skipped here, {} MiB received", s.producer_batches,
         s.samples_produced, s.samples_decoded, s.samples_skipped, s.exchange_bytes >> 20);
  return Status::Ok();
}

// ---------------------------------------------------------------------------- shard

// Local trainer index -> member bit, from the ranks consumers sent in their join request.
Result<std::map<int, uint64_t>> MultinodeLeader::MapTrainers() {
  std::map<int, uint64_t> bits;
  for (const shm::MemberInfo& m : ring_->Members()) {
    auto it = multi_.trainer_index.find(m.rank);
    if (it == multi_.trainer_index.end()) {
      BC_LOG(Warn, Node, "multinode leader: {} is not one of this node's trainers; it gets "
             "nothing in shard mode", m.Describe());
      continue;
    }
    bits[it->second] = shm::RingLeader::MemberBit(m.id);
  }
  for (const auto& [rank, t] : multi_.trainer_index)
    if (!bits.count(t))
      return FailedPreconditionError(
          "multinode leader: trainer {} (rank {}) did not attach to its node leader; every "
          "trainer must attach before the stream starts in shard mode", t, rank);
  return bits;
}

// Shard mode has no late join: the parts of a global batch are fixed when the stream starts
// (every trainer attaches first). A consumer joining later is told so in the leader's log once
// and receives nothing (it stays a joiner).
void MultinodeLeader::WarnLateShardJoiners() {
  for (const shm::MemberInfo& m : ring_->Members()) {
    const uint64_t bit = shm::RingLeader::MemberBit(m.id);
    if (m.state != shm::MemberState::kJoining || (warned_joiners_ & bit) != 0) continue;
    warned_joiners_ |= bit;
    BC_LOG(Warn, Node, "multinode leader (shard): {} joined after the stream started; shard mode "
           "has no late join (every trainer attaches before the first batch), so it receives "
           "nothing; use mode=replicate or one node for late joiners", m.Describe());
  }
}

Status MultinodeLeader::RunShard() {
  BC_ASSIGN_OR_RETURN(auto bits, MapTrainers());
  const int T = multi_.total_trainers;
  // Resume (start_epoch / start_batch): every trainer's batch k is its part of global batch k.
  const auto start = static_cast<uint64_t>(config_.options.start_epoch);
  for (uint64_t e = start; e < static_cast<uint64_t>(config_.options.epochs); ++e) {
    const int64_t G = plan_.BatchesPerEpoch();
    for (int64_t g = e == start ? producer::ResumeFirstGlobalBatch(config_.options) : 0; g < G;
         ++g) {
      if (abort_.set()) return abort_.Error("multinode leader");
      if (ring_->CountMembers(shm::MemberState::kActive) == 0) {
        BC_LOG(Info, Node, "multinode leader: every consumer has left at epoch {} batch {}", e, g);
        return Status::Ok();
      }
      WarnLateShardJoiners();
      std::span<const int64_t> global = plan_.Batch(e, g);
      for (const auto& [t, bit] : bits) {
        SampleRange r = ShardPart(static_cast<int64_t>(global.size()), T, t);
        if (r.count == 0) continue;  // R < T: trainers t >= R get no part of this batch
        BC_RETURN_IF_ERROR(PublishPart(e, g, G, global.subspan(size_t(r.begin), size_t(r.count)),
                                       bit));
      }
    }
    // This node reads only its trainers' shard: an epoch whose shard held no good sample
    // ends the stream with an error naming the epoch and the shard (its trainers would have
    // nothing to train on while the others train, or every trainer waits forever).
    BC_RETURN_IF_ERROR(writer_->EndEpoch(e).WithContext(DescribeShard()));
  }
  return Status::Ok();
}

// "node 1's shard (trainers at world ranks 5, 6)".
std::string MultinodeLeader::DescribeShard() const {
  std::string ranks;
  for (const auto& [rank, t] : multi_.trainer_index)
    ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", rank);
  return fmt::format("node {}'s shard (trainers at world ranks {})", multi_.node_index, ranks);
}

Status MultinodeLeader::PublishPart(uint64_t epoch, int64_t g, int64_t batches,
                                    std::span<const int64_t> part, uint64_t target) {
  producer::ProduceRequest req;
  req.samples = part;
  req.sample = layout_;
  producer::SlotContents& c = req.contents;
  c.epoch = epoch;
  c.batch = g;
  c.batches_in_epoch = batches;
  c.samples_in_epoch = static_cast<uint64_t>(plan_.num_samples());
  return writer_->Produce(*source_, req, target).status();
}

// -------------------------------------------------------------------------- replicate

namespace {

// Per node and producer batch, the metadata block that travels with its share:
// {failed, has consumers, world rank, samples in the share}, labels[count], ids[count].
constexpr int64_t kMetaHeader = 4;
constexpr int kTagBase = 4100;  // images: kTagBase, metadata: kTagBase + 1

int64_t MaxShare(int64_t n, int nodes) { return (n + nodes - 1) / nodes; }

}  // namespace

// Once, before the stream: {failed, has consumers, -depth} under MPI_MAX, so that every
// leader learns whether to start and uses the same window (the smallest proposed).
Status MultinodeLeader::Agree(const Status& local, bool* go) {
  const int slots = static_cast<int>(ring_->config().num_slots);
  const int local_depth = std::max(1, std::min(multi_.exchange_depth, slots - 1));
  int mine[3] = {local.ok() ? 0 : 1, admission_->Attached() > 0 ? 1 : 0, -local_depth};
  int all[3] = {0, 0, 0};
  BC_MPI(MPI_Allreduce(mine, all, 3, MPI_INT, MPI_MAX, multi_.leaders),
         "MPI_Allreduce (node leaders: start, exchange depth)");
  depth_ = -all[2];
  *go = all[0] == 0 && all[1] != 0;
  if (all[0] == 0) return Status::Ok();
  return StopTogether(local.ok() ? UnavailableError("multinode leader: another node leader failed "
                                                    "before the stream started (its rank printed "
                                                    "the cause); stopping node {}",
                                                    multi_.node_index)
                                 : local);
}

Status MultinodeLeader::StopTogether(const Status& why) {
  // This is the node's one report of the failure, printed before the barrier so that it
  // is out before any rank exits (Runtime::Serve does not repeat it).
  log::Report(log::kNode, fmt::format("multinode leader of node {}: {}", multi_.node_index,
                                      why.message()));
  reported_ = true;
  BC_MPI(MPI_Barrier(multi_.leaders), "MPI_Barrier (node leaders: every report printed before "
                                      "the stream fails)");
  return why;
}

Status MultinodeLeader::RunReplicate() {
  bool go = false;
  BC_RETURN_IF_ERROR(Agree(abort_.set() ? abort_.Error("multinode leader (before the stream "
                                                        "started)")
                                         : Status::Ok(),
                           &go));
  if (!go) {
    BC_LOG(Info, Node, "multinode leader: no consumer on any node; ending");
    return Status::Ok();
  }
  stats_.exchange_depth = depth_;
  uint64_t index = 0;
  // Resume (start_epoch / start_batch): every node starts at the producer batch holding the
  // trainers' position, as the node leader of one node does.
  const auto start = static_cast<uint64_t>(config_.options.start_epoch);
  const int64_t first = producer::ResumeFirstBatch(config_.options, plan_.producer_batch());
  for (uint64_t e = start; e < static_cast<uint64_t>(config_.options.epochs); ++e) {
    const int64_t bpe = plan_.BatchesPerEpoch();
    const int64_t k0 = e == start ? std::min(first, bpe) : 0;
    for (int64_t k = k0; k < bpe; ++k) {
      // Batch index - depth must be finished (its flags read) before batch index starts;
      // then every leader decides from the same flags whether it starts at all.
      while (!in_flight_.empty() && in_flight_.front()->index + uint64_t(depth_) <= index)
        BC_RETURN_IF_ERROR(FinishOldest());
      if (stop_at_ != UINT64_MAX && index >= stop_at_ + uint64_t(depth_)) goto drain;
      // Joiners are admitted at once and start at the next epoch (its first position).
      // A stream resumed mid-epoch admits its first joiners at its first position.
      admission_->AdmitJoiners(ring_->next_seq() + in_flight_.size(), k - k0, bpe - k0);
      BC_RETURN_IF_ERROR(StartReplicated(e, k, bpe, index));
      ++index;
    }
  }
drain:
  while (!in_flight_.empty()) BC_RETURN_IF_ERROR(FinishOldest());
  // Every leader read the same failed flag: all stop together, each report printed first.
  if (stop_failed_)
    return StopTogether(!local_error_.ok() ? local_error_
                                           : UnavailableError("multinode leader: node leader {} "
                                                              "(rank {}) failed (its rank printed "
                                                              "the cause); stopping node {}",
                                                              failed_node_, failed_rank_,
                                                              multi_.node_index));
  if (!local_error_.ok()) return local_error_;
  if (stop_at_ != UINT64_MAX)
    BC_LOG(Info, Node, "multinode leader: no consumer left on any node after producer batch "
           "{}; ending", stop_at_);
  return Status::Ok();
}

// Acquires the slot of batch `index` (progressing the exchanges in flight while it waits),
// decodes this node's share into it slice by slice (progressing between slices), and posts
// its exchange. After a local failure it still takes part, from scratch memory, with its
// failed flag set, so that the other leaders' messages find their matches.
Status MultinodeLeader::StartReplicated(uint64_t epoch, int64_t k, int64_t bpe, uint64_t index) {
  auto f = std::make_unique<InFlight>();
  f->epoch = epoch;
  f->k = k;
  f->bpe = bpe;
  f->index = index;
  if (local_error_.ok() && abort_.set()) local_error_ = abort_.Error("multinode leader");
  // After a stop is known (the batches still started then are drained, never published) or a
  // local failure, the batch goes through scratch memory: its slot position may be taken.
  if (local_error_.ok() && stop_at_ == UINT64_MAX) {
    // While the slot is held, progress the exchanges in flight (polling 1 ms while any is
    // pending). An error of Progress() fails the run; an acquire failure is local.
    Status progress;
    producer::AcquireWait wait;
    wait.poll_ms = [this] {
      const bool pending = std::any_of(in_flight_.begin(), in_flight_.end(),
                                       [](const auto& x) { return !x->done; });
      return pending ? int64_t(1) : int64_t(-1);
    };
    wait.on_timeout = [this, &progress]() -> Result<bool> {
      progress = Progress();
      return !progress.ok();
    };
    auto w = writer_->Acquire(ring_->next_seq() + in_flight_.size(), wait);
    BC_RETURN_IF_ERROR(progress);
    if (w.ok()) {
      f->w = **w;
      f->data = f->w.data;
    } else {
      local_error_ = w.status();
    }
  }
  if (f->data == nullptr) {
    f->scratch.resize(ring_->config().slot_bytes);
    f->data = f->scratch.data();
  }
  std::span<const int64_t> samples = plan_.Batch(epoch, k);
  f->n = static_cast<int64_t>(samples.size());
  const int N = multi_.num_nodes, me = multi_.node_index;
  const uint64_t sb = layout_.bytes();
  const SampleRange mine = ReplicateShare(f->n, N, me);
  int64_t* ids = writer_->layout().ids(f->data);
  int64_t* labels = writer_->layout().labels(f->data);
  // Slices of at least 2 samples per decode thread, so a slice keeps the workers busy.
  const int64_t min_slice = std::max(2, 2 * source_->threads());
  const int slices = static_cast<int>(std::clamp<int64_t>(mine.count / min_slice, 1,
                                                          std::max(1, multi_.decode_slices)));
  for (int c = 0; c < slices; ++c) {
    const SampleRange r = ChunkOf(mine, slices, c);
    if (local_error_.ok() && stop_at_ == UINT64_MAX) {
      Status st = DecodeSlice(f.get(), samples.subspan(size_t(r.begin), size_t(r.count)), r.begin);
      if (!st.ok())
        local_error_ = st.WithContext(
            fmt::format("multinode leader: epoch {} producer batch {}", epoch, k));
    } else {
      std::fill(ids + r.begin, ids + r.begin + r.count, int64_t(-1));
    }
    if (c + 1 < slices) BC_RETURN_IF_ERROR(Progress());
  }
  // This node's metadata block; the others' blocks are received at their offsets.
  const int64_t stride = kMetaHeader + 2 * MaxShare(f->n, N);
  f->meta.assign(size_t(stride) * size_t(N), 0);
  int64_t* block = f->meta.data() + size_t(stride) * size_t(me);
  block[0] = (!local_error_.ok() || abort_.set()) ? 1 : 0;
  block[1] = admission_->Attached() > 0 ? 1 : 0;
  block[2] = config_.rank;
  block[3] = mine.count;
  std::copy(labels + mine.begin, labels + mine.begin + mine.count, block + kMetaHeader);
  std::copy(ids + mine.begin, ids + mine.begin + mine.count, block + kMetaHeader + mine.count);
  mpi::ExchangeArray arrays[2];
  arrays[0].base = f->data;
  arrays[1].base = reinterpret_cast<uint8_t*>(f->meta.data());
  for (int j = 0; j < N; ++j) {
    const SampleRange r = ReplicateShare(f->n, N, j);
    arrays[0].counts.push_back(uint64_t(r.count) * sb);
    arrays[0].displs.push_back(uint64_t(r.begin) * sb);
    arrays[1].counts.push_back(uint64_t(kMetaHeader + 2 * r.count) * sizeof(int64_t));
    arrays[1].displs.push_back(uint64_t(stride) * uint64_t(j) * sizeof(int64_t));
  }
  BC_RETURN_IF_ERROR(f->exchange.Start(multi_.leaders, arrays, kTagBase)
                         .WithContext("multinode leader"));
  f->posted_ns = shm::MonotonicNs();
  if (in_flight_.empty()) busy_since_ = f->posted_ns;
  in_flight_.push_back(std::move(f));
  return Progress();
}

// Decodes samples into positions [pos, pos + samples.size()); ids of skipped ones are -1.
Status MultinodeLeader::DecodeSlice(InFlight* f, std::span<const int64_t> samples, int64_t pos) {
  uint32_t written = 0;
  return writer_->Fill(*source_, f->epoch, 0, samples, layout_, f->data, pos, &f->record,
                       &written);
}

Status MultinodeLeader::Progress() {
  for (auto& f : in_flight_)
    if (!f->done) BC_RETURN_IF_ERROR(f->exchange.Test(&f->done).WithContext("multinode leader"));
  while (!in_flight_.empty() && in_flight_.front()->done) {
    BC_RETURN_IF_ERROR(FinishReplicated(in_flight_.front().get()));
    in_flight_.pop_front();
  }
  if (in_flight_.empty()) NoteExchangeIdle();
  return Status::Ok();
}

Status MultinodeLeader::FinishOldest() {
  InFlight* f = in_flight_.front().get();
  if (!f->done) {
    const int64_t t0 = shm::MonotonicNs();
    BC_RETURN_IF_ERROR(f->exchange.Wait().WithContext("multinode leader"));
    f->wait_ns = shm::MonotonicNs() - t0;
    stats_.exchange_wait_ns += f->wait_ns;
    f->done = true;
  }
  BC_RETURN_IF_ERROR(FinishReplicated(f));
  in_flight_.pop_front();
  if (in_flight_.empty()) NoteExchangeIdle();
  return Status::Ok();
}

void MultinodeLeader::NoteExchangeIdle() {
  if (busy_since_ < 0) return;
  stats_.exchange_ns += shm::MonotonicNs() - busy_since_;
  busy_since_ = -1;
}

// Reads every node's flags for the batch (the agreement), then, unless the stream stops at
// or before it, copies the other nodes' labels and ids into the slot, compacts skipped
// samples away (the same on every node) and publishes.
Status MultinodeLeader::FinishReplicated(InFlight* f) {
  const int64_t done_ns = shm::MonotonicNs();
  const int N = multi_.num_nodes;
  const int64_t stride = kMetaHeader + 2 * MaxShare(f->n, N);
  stats_.exchange_bytes += f->exchange.bytes_received();
  if (telemetry::Collector* tc = config_.collector) {
    tc->Add(telemetry::Counter::kBytesMpi, f->exchange.bytes_received());
    // The stage time is what the exchange cost this leader (blocked waiting for it); the
    // span shows the whole time it was in flight, overlapping the decode of later batches.
    tc->AddTime(telemetry::Timer::kExchange, f->wait_ns);
    tc->Span(telemetry::SpanKind::kExchange, f->w.seq, f->posted_ns, done_ns);
  }
  bool any_failed = false, any_consumers = false;
  for (int j = 0; j < N; ++j) {
    const int64_t* block = f->meta.data() + size_t(stride) * size_t(j);
    if (block[0] != 0 && !any_failed) {
      any_failed = true;
      if (stop_at_ == UINT64_MAX || !stop_failed_) failed_rank_ = int(block[2]), failed_node_ = j;
    }
    any_consumers = any_consumers || block[1] != 0;
  }
  if ((any_failed || !any_consumers) && stop_at_ == UINT64_MAX) {
    stop_at_ = f->index;
    stop_failed_ = any_failed;
  }
  if (stop_at_ <= f->index || !local_error_.ok()) return Status::Ok();  // not published
  int64_t* labels = writer_->layout().labels(f->data);
  int64_t* ids = writer_->layout().ids(f->data);
  for (int j = 0; j < N; ++j) {
    if (j == multi_.node_index) continue;
    const SampleRange r = ReplicateShare(f->n, N, j);
    const int64_t* block = f->meta.data() + size_t(stride) * size_t(j);
    std::copy(block + kMetaHeader, block + kMetaHeader + r.count, labels + r.begin);
    std::copy(block + kMetaHeader + r.count, block + kMetaHeader + 2 * r.count, ids + r.begin);
  }
  const uint32_t published = Compact(f->data, static_cast<uint32_t>(f->n));
  producer::SlotContents c;
  c.epoch = f->epoch;
  c.batch = f->k;
  c.batches_in_epoch = f->bpe;
  c.samples_in_epoch = static_cast<uint64_t>(plan_.num_samples());
  c.num_samples = published;
  c.skipped = static_cast<uint32_t>(f->n) - published;
  c.layout = layout_;
  BC_RETURN_IF_ERROR(writer_->Publish(f->w, c, ~0ULL, f->record).status());
  if (f->k + 1 != f->bpe) return Status::Ok();
  stats_.epoch_end_ns.push_back(shm::MonotonicNs());
  // Every node publishes the same batches, so every node finds an epoch without a good
  // sample at the same batch and fails the same way.
  return writer_->EndEpoch(f->epoch);
}

// Removes positions whose id is -1 (samples skipped on some node), keeping the order.
// Every node does the same on the same data, so all nodes publish the same batch.
uint32_t MultinodeLeader::Compact(uint8_t* data, uint32_t n) {
  int64_t* labels = writer_->layout().labels(data);
  int64_t* ids = writer_->layout().ids(data);
  const uint64_t sb = layout_.bytes();
  uint32_t out = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (ids[i] < 0) continue;
    if (out != i) {
      std::memmove(data + uint64_t(out) * sb, data + uint64_t(i) * sb, sb);
      labels[out] = labels[i];
      ids[out] = ids[i];
    }
    ++out;
  }
  return out;
}

Status MultinodeLeader::WaitUntilEmpty(int64_t timeout_ms) {
  return producer::WaitUntilEmpty(*ring_, timeout_ms, "multinode leader");
}

}  // namespace batchcast::node
