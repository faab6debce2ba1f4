// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/multinode_leader.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "node/slot_fill.h"
#include "node/multinode_plan.h"
#include "transport/mpi/mpi_status.h"
#include "transport/shm/carving.h"
#include "transport/shm/futex.h"

namespace batchcast::node {
namespace {

uint64_t Align(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

MultinodeLeader::MultinodeLeader(const LeaderConfig& config, std::unique_ptr<BatchSource> source,
                                 const MultinodeConfig& multi, int64_t producer_batch,
                                 int64_t num_samples)
    : config_(config),
      multi_(multi),
      source_(std::move(source)),
      plan_(num_samples, producer_batch, config.options.seed, config.options.shuffle) {}

Result<std::unique_ptr<MultinodeLeader>> MultinodeLeader::Create(
    const LeaderConfig& config, std::unique_ptr<BatchSource> source,
    const MultinodeConfig& multi) {
  const Options& o = config.options;
  if (!o.resize.empty())
    return InvalidArgumentError(
        "multinode leader: progressive resizing ('resize') is not supported across nodes yet; "
        "unset it or run on one node");
  const uint32_t max_b = config.max_consumer_batch ? config.max_consumer_batch
                                                   : static_cast<uint32_t>(o.batch_size);
  int64_t n = source->num_samples();
  if (o.limit_samples > 0) n = std::min(n, o.limit_samples);
  if (n <= 0) return InvalidArgumentError("multinode leader: the dataset has no samples");
  const bool shard = multi.mode == MultinodeMode::kShard;
  if (shard && multi.total_trainers <= 0)
    return InvalidArgumentError("multinode leader: shard mode needs the number of trainers");
  // Shard: the stream plan's "producer batch" is the global batch T x b; a slot holds one
  // trainer's part (<= b). Replicate: the usual producer batch.
  int64_t p = shard ? int64_t(multi.total_trainers) * max_b
                    : (o.producer_batch > 0 ? o.producer_batch : 2 * int64_t(max_b));
  if (!shard && p < max_b)
    return InvalidArgumentError(
        "producer_batch {} is smaller than the largest consumer batch {}; raise producer_batch",
        p, max_b);
  std::unique_ptr<MultinodeLeader> l(new MultinodeLeader(config, std::move(source), multi, p, n));
  l->layout_ = l->source_->MaxLayout();
  const int64_t slot_samples = shard ? int64_t(max_b) : p;
  l->capacity_samples_ = uint64_t(slot_samples) + 2 * uint64_t(max_b) - 1;
  const uint64_t images = l->capacity_samples_ * l->layout_.bytes();
  l->labels_offset_ = Align(images, 64);
  l->ids_offset_ = Align(l->labels_offset_ + l->capacity_samples_ * sizeof(int64_t), 64);
  shm::RingConfig rc;
  int slots = o.ring_slots > 0 ? o.ring_slots : o.buffer_depth + 2;
  // Shard: each local trainer holds its own slots; give each room for buffer_depth + 2.
  if (shard) slots = std::max(slots, config.expected_consumers * (o.buffer_depth + 2));
  rc.num_slots = static_cast<uint32_t>(slots);
  rc.slot_bytes = Align(l->ids_offset_ + l->capacity_samples_ * sizeof(int64_t), 4096);
  rc.max_consumer_batch = max_b;
  rc.producer_batch = static_cast<uint32_t>(slot_samples);
  // Consumers derive BatchesPerEpoch from these: shard = one part per global batch.
  rc.epoch_samples = shard ? uint64_t(GlobalBatchesPerEpoch(n, multi.total_trainers,
                                                            static_cast<int>(max_b))) * max_b
                           : uint64_t(n);
  rc.socket_name = config.socket_name;
  rc.job = config.job;
  rc.rank = config.rank;
  rc.heartbeat_ms = o.heartbeat_ms;
  auto ring = shm::RingLeader::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("multinode leader");
  l->ring_ = std::move(ring).value();
  if (shard)
    BC_LOG(Info, Node, "multinode leader (shard): {} samples/epoch, {} trainers x b={} = global "
           "batch {}, {} local trainers, {} slots of {} MiB", n, multi.total_trainers, max_b, p,
           multi.trainer_index.size(), slots, rc.slot_bytes >> 20);
  else
    BC_LOG(Info, Node, "multinode leader (replicate): node {} of {}, {} samples/epoch, producer "
           "batch {}, share ~{}, {} chunks, slot {} MiB", multi.node_index, multi.num_nodes, n,
           p, p / multi.num_nodes, multi.exchange_chunks, rc.slot_bytes >> 20);
  return l;
}

void MultinodeLeader::Abort(const std::string& why) {
  abort_.store(true);
  ring_->Fail(why);
}

Status MultinodeLeader::Run() {
  if (config_.expected_consumers > 0) {
    Status st = ring_->WaitForJoined(config_.expected_consumers, config_.join_timeout_ms);
    if (!st.ok()) {
      ring_->Fail(st.message());
      if (multi_.mode == MultinodeMode::kReplicate) {
        bool go = false;
        Agree(true, &go).IgnoreError();  // let the other leaders fail instead of hanging
      }
      return st;
    }
  }
  ring_->AdmitJoining(0);
  Status st = multi_.mode == MultinodeMode::kShard ? RunShard() : RunReplicate();
  if (!st.ok()) {
    ring_->Fail(st.message());
    return st;
  }
  ring_->End();
  BC_LOG(Info, Node, "multinode leader: stream complete: {} slots, {} samples published, {} "
         "decoded here, {} skipped, {} MiB received", stats_.producer_batches,
         stats_.samples_published, stats_.samples_decoded, stats_.samples_skipped,
         stats_.exchange_bytes >> 20);
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

Status MultinodeLeader::RunShard() {
  BC_ASSIGN_OR_RETURN(auto bits, MapTrainers());
  const int T = multi_.total_trainers;
  for (uint64_t e = 0; e < static_cast<uint64_t>(config_.options.epochs); ++e) {
    const int64_t G = plan_.BatchesPerEpoch();
    for (int64_t g = 0; g < G; ++g) {
      if (abort_.load()) return CancelledError("multinode leader: aborted");
      if (ring_->CountMembers(shm::MemberState::kActive) == 0) {
        BC_LOG(Info, Node, "multinode leader: every consumer has left at epoch {} batch {}", e, g);
        return Status::Ok();
      }
      std::span<const int64_t> global = plan_.Batch(e, g);
      for (const auto& [t, bit] : bits) {
        SampleRange r = ShardPart(static_cast<int64_t>(global.size()), T, t);
        if (r.count == 0) continue;  // R < T: trainers t >= R get no part of this batch
        BC_RETURN_IF_ERROR(PublishPart(e, g, G, global.subspan(size_t(r.begin), size_t(r.count)),
                                       bit));
      }
    }
  }
  return Status::Ok();
}

Status MultinodeLeader::PublishPart(uint64_t epoch, int64_t g, int64_t batches,
                                    std::span<const int64_t> part, uint64_t target) {
  int64_t t0 = shm::MonotonicNs();
  BC_ASSIGN_OR_RETURN(shm::SlotWrite w, ring_->AcquireSlot());
  int64_t t1 = shm::MonotonicNs();
  stats_.slot_wait_ns += t1 - t0;
  auto* labels = reinterpret_cast<int64_t*>(w.data + labels_offset_);
  auto* ids = reinterpret_cast<int64_t*>(w.data + ids_offset_);
  pipeline::BatchRequest req;
  req.epoch = epoch;
  req.samples = part;
  req.images = w.data;
  req.labels = labels;
  pipeline::BatchResult result;
  Status st = source_->Fill(req, &result);
  if (!st.ok())
    return st.WithContext(fmt::format("multinode leader: epoch {} global batch {}", epoch, g));
  stats_.fill_ns += shm::MonotonicNs() - t1;
  const auto n = static_cast<uint32_t>(result.written);
  if (result.kept.size() == n) std::copy(result.kept.begin(), result.kept.end(), ids);
  else std::copy(part.begin(), part.begin() + n, ids);
  stats_.samples_decoded += static_cast<int64_t>(part.size());
  stats_.samples_skipped += static_cast<int64_t>(result.skipped.size());
  for (size_t i = 0; i < result.skipped.size(); ++i)
    BC_LOG(Warn, Node, "multinode leader: skipped sample {}: {}", result.skipped[i],
           i < result.skip_reasons.size() ? result.skip_reasons[i] : "bad sample");
  BC_RETURN_IF_ERROR(Finish(w, epoch, g, batches, n, target).status());
  return Status::Ok();
}

// Tail copies for the receivers in `only`, the descriptor, and the publish.
Result<uint64_t> MultinodeLeader::Finish(const shm::SlotWrite& w, uint64_t epoch, int64_t k,
                                         int64_t batches, uint32_t n, uint64_t only) {
  SlotContents c;
  c.epoch = epoch;
  c.batch = k;
  c.batches_in_epoch = batches;
  c.samples_in_epoch = static_cast<uint64_t>(plan_.num_samples());
  c.num_samples = n;
  c.layout = layout_;
  c.labels_offset = labels_offset_;
  c.ids_offset = ids_offset_;
  c.capacity_samples = capacity_samples_;
  BC_RETURN_IF_ERROR(
      CompleteSlot(w, TailForReceivers(*ring_, w.seq, only, c), c).WithContext("leader"));
  const uint64_t receivers = ring_->Publish(w, only);
  stats_.producer_batches += 1;
  stats_.samples_published += n;
  return receivers;
}

// -------------------------------------------------------------------------- replicate

// One allreduce per producer batch: {failed, consumers here} under MPI_MAX.
Status MultinodeLeader::Agree(bool failed, bool* go) {
  int mine[2] = {failed ? 1 : 0,
                 ring_->CountMembers(shm::MemberState::kActive) +
                             ring_->CountMembers(shm::MemberState::kJoining) > 0 ? 1 : 0};
  int all[2] = {0, 0};
  BC_MPI(MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, multi_.leaders),
         "MPI_Allreduce (node leaders: go/end/fail)");
  if (all[0] != 0 && !failed)
    return UnavailableError("multinode leader: another node leader failed (its rank printed the "
                        "cause); stopping node {}", multi_.node_index);
  *go = all[0] == 0 && all[1] != 0;
  return Status::Ok();
}

Status MultinodeLeader::RunReplicate() {
  exchange_ = std::make_unique<mpi::ChunkExchange>(multi_.leaders);
  for (uint64_t e = 0; e < static_cast<uint64_t>(config_.options.epochs); ++e) {
    const int64_t bpe = plan_.BatchesPerEpoch();
    for (int64_t k = 0; k < bpe; ++k) {
      if (k == 0 && e > 0) ring_->AdmitJoining(ring_->next_seq());
      const bool aborted = abort_.load();
      bool go = false;
      BC_RETURN_IF_ERROR(Agree(aborted, &go));
      if (aborted) return CancelledError("multinode leader: aborted");
      if (!go) {
        BC_LOG(Info, Node, "multinode leader: no consumer left on any node at epoch {} batch "
               "{}; ending", e, k);
        return Status::Ok();
      }
      Status st = ProduceReplicated(e, k, bpe);
      if (!st.ok()) {
        Agree(true, &go).IgnoreError();  // the others learn it at their next agreement
        return st;
      }
    }
  }
  return Status::Ok();
}

// Decodes samples into positions [pos, pos + samples.size()); ids of skipped ones are -1.
Status MultinodeLeader::DecodeChunk(uint64_t epoch, std::span<const int64_t> samples,
                                    int64_t pos, uint8_t* data) {
  if (samples.empty()) return Status::Ok();
  auto* labels = reinterpret_cast<int64_t*>(data + labels_offset_) + pos;
  auto* ids = reinterpret_cast<int64_t*>(data + ids_offset_) + pos;
  pipeline::BatchRequest req;
  req.epoch = epoch;
  req.samples = samples;
  req.images = data + uint64_t(pos) * layout_.bytes();
  req.labels = labels;
  pipeline::BatchResult result;
  Status st = source_->Fill(req, &result);
  const size_t n = st.ok() ? size_t(result.written) : 0;
  if (result.kept.size() == n) std::copy(result.kept.begin(), result.kept.begin() + n, ids);
  else std::copy(samples.begin(), samples.begin() + n, ids);
  std::fill(ids + n, ids + samples.size(), int64_t(-1));
  stats_.samples_decoded += static_cast<int64_t>(samples.size());
  stats_.samples_skipped += static_cast<int64_t>(result.skipped.size());
  for (size_t i = 0; i < result.skipped.size(); ++i)
    BC_LOG(Warn, Node, "multinode leader: skipped sample {}: {}", result.skipped[i],
           i < result.skip_reasons.size() ? result.skip_reasons[i] : "bad sample");
  return st;
}

Status MultinodeLeader::ProduceReplicated(uint64_t epoch, int64_t k, int64_t bpe) {
  int64_t t0 = shm::MonotonicNs();
  BC_ASSIGN_OR_RETURN(shm::SlotWrite w, ring_->AcquireSlot());
  int64_t t1 = shm::MonotonicNs();
  stats_.slot_wait_ns += t1 - t0;
  std::span<const int64_t> samples = plan_.Batch(epoch, k);
  const int64_t n = static_cast<int64_t>(samples.size());
  const int N = multi_.num_nodes, C = std::max(1, multi_.exchange_chunks);
  const uint64_t sb = layout_.bytes();
  if (uint64_t(n) * sb > uint64_t(INT_MAX))
    return InvalidArgumentError("multinode leader: a producer batch of {} samples x {} bytes "
                                "exceeds one MPI count (2 GiB); lower producer_batch", n, sb);
  const SampleRange mine = ReplicateShare(n, N, multi_.node_index);
  Status decode_status;
  const int64_t exchange_start = shm::MonotonicNs();
  for (int c = 0; c < C; ++c) {
    const SampleRange chunk = ChunkOf(mine, C, c);
    if (decode_status.ok())
      decode_status = DecodeChunk(epoch, samples.subspan(size_t(chunk.begin), size_t(chunk.count)),
                                  chunk.begin, w.data);
    if (!decode_status.ok()) {  // keep exchanging so the other leaders do not hang
      auto* ids = reinterpret_cast<int64_t*>(w.data + ids_offset_);
      std::fill(ids + chunk.begin, ids + chunk.begin + chunk.count, int64_t(-1));
    }
    // In place: this node's chunk is already at its displacement in the slot; the exchange
    // thread moves it while this thread decodes the next chunk.
    std::vector<mpi::GatherPart> parts(3);
    parts[0].base = w.data;
    parts[1].base = w.data + labels_offset_;
    parts[2].base = w.data + ids_offset_;
    parts[1].type = parts[2].type = MPI_INT64_T;
    for (int j = 0; j < N; ++j) {
      const SampleRange r = ChunkOf(ReplicateShare(n, N, j), C, c);
      parts[0].counts.push_back(static_cast<int>(uint64_t(r.count) * sb));
      parts[0].displs.push_back(static_cast<int>(uint64_t(r.begin) * sb));
      for (int a = 1; a < 3; ++a) {
        parts[size_t(a)].counts.push_back(static_cast<int>(r.count));
        parts[size_t(a)].displs.push_back(static_cast<int>(r.begin));
      }
      if (j != multi_.node_index) stats_.exchange_bytes += int64_t(r.count) * int64_t(sb + 16);
    }
    exchange_->Post(std::move(parts));
  }
  const int64_t t2 = shm::MonotonicNs();
  Status exchanged = exchange_->Drain();
  const int64_t t3 = shm::MonotonicNs();
  stats_.exchange_wait_ns += t3 - t2;
  stats_.exchange_ns += t3 - exchange_start;
  stats_.fill_ns += t2 - t1;
  if (!exchanged.ok()) return exchanged.WithContext("multinode leader");
  if (!decode_status.ok())
    return decode_status.WithContext(
        fmt::format("multinode leader: epoch {} producer batch {}", epoch, k));
  auto published = static_cast<uint32_t>(n);
  Compact(w.data, &published);
  BC_RETURN_IF_ERROR(Finish(w, epoch, k, bpe, published, ~0ULL).status());
  return Status::Ok();
}

// Removes positions whose id is -1 (samples skipped on some node), keeping the order.
// Every node does the same on the same data, so all nodes publish the same batch.
void MultinodeLeader::Compact(uint8_t* data, uint32_t* n) {
  auto* labels = reinterpret_cast<int64_t*>(data + labels_offset_);
  auto* ids = reinterpret_cast<int64_t*>(data + ids_offset_);
  const uint64_t sb = layout_.bytes();
  uint32_t out = 0;
  for (uint32_t i = 0; i < *n; ++i) {
    if (ids[i] < 0) continue;
    if (out != i) {
      std::memmove(data + uint64_t(out) * sb, data + uint64_t(i) * sb, sb);
      labels[out] = labels[i];
      ids[out] = ids[i];
    }
    ++out;
  }
  *n = out;
}

Status MultinodeLeader::WaitUntilEmpty(int64_t timeout_ms) {
  const int64_t deadline = shm::MonotonicNs() + timeout_ms * 1000000LL;
  auto attached = [this] {
    return ring_->CountMembers(shm::MemberState::kActive) +
           ring_->CountMembers(shm::MemberState::kJoining);
  };
  while (attached() > 0) {
    if (shm::MonotonicNs() > deadline)
      return DeadlineExceededError("multinode leader: consumers still attached after {} ms",
                                   timeout_ms);
    const uint32_t v = ring_->header()->member_futex.load();
    if (attached() == 0) break;
    shm::FutexWait(&ring_->header()->member_futex, v, 100000000LL);
  }
  return Status::Ok();
}

}  // namespace batchcast::node
