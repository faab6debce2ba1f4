// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/exchange_feed.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "core/errors.h"
#include "core/log.h"
#include "producer/batch_plan.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "transport/mpi/batch_exchange.h"
#include "core/mpi_status.h"
#include "transport/shm/futex.h"

namespace batchcast::producer {
namespace {

// Per node and producer batch, the metadata block that travels with its share: a header
// {failed, has consumers, world rank, samples in the share, and what the sender planned: epoch,
// position, samples of the producer batch, image size, bytes per sample}, then labels[count],
// ids[count]. The receiver checks the planned fields against its own plan.
enum MetaField : int64_t {
  kFailed, kHasConsumers, kRank, kCount, kEpoch, kPosition, kBatchSamples, kImageSize,
  kSampleBytes, kMetaHeader
};
constexpr int kTagBase = 4100;  // images: kTagBase, metadata: kTagBase + 1

class ExchangeFeed final : public Feed {
 public:
  ExchangeFeed(std::unique_ptr<BatchSource> source, const ExchangeConfig& config)
      : source_(std::move(source)), config_(config) {}
  const char* name() const override { return "multi-node exchange"; }
  Replay replay() const override { return Replay::kNone; }
  int threads() const override { return source_->threads(); }
  bool reported() const override { return reported_; }
  FeedStats stats() const override { return stats_; }
  // Every node finds an epoch without a good sample at the same batch, when it publishes it.
  Status EndEpoch(uint64_t) override { return Status::Ok(); }
  const schedule::ResizeSchedule* resize_schedule() const override {
    return plan_ == nullptr ? nullptr : plan_->resize_schedule();
  }

  // The same plan as one node's (BatchPlan): every node leader derives the same producer
  // batches, with a schedule each at its image size, from the same options.
  Status Plan(const Options& o, uint32_t max_consumer_batch, std::string_view who,
              FeedPlan* plan) override {
    who_ = std::string(who);
    BC_ASSIGN_OR_RETURN(plan_, BatchPlan::Create(o, max_consumer_batch, *source_, who,
                                                 config_.print_plan, plan));
    return Status::Ok();
  }

  void Attach(SlotWriter* writer, telemetry::Collector* collector) override {
    Feed::Attach(writer, collector);
    plan_->Annotate(collector);
  }

  Result<int64_t> BeginEpoch(uint64_t epoch) override {
    return plan_->BeginEpoch(epoch, collector_);
  }

  // Once, before the stream: {failed, has consumers, -depth} under MPI_MAX, so that every
  // leader learns whether to start and uses the same window (the smallest proposed).
  Status Agree(const Status& local, bool has_consumers, bool* go) {
    const int slots = static_cast<int>(writer_->ring().config().num_slots);
    const int local_depth = std::max(1, std::min(config_.exchange_depth, slots - 1));
    int mine[3] = {local.ok() ? 0 : 1, has_consumers ? 1 : 0, -local_depth};
    int all[3] = {0, 0, 0};
    BC_MPI(MPI_Allreduce(mine, all, 3, MPI_INT, MPI_MAX, config_.leaders),
           "MPI_Allreduce (node leaders: start, exchange depth)");
    depth_ = -all[2];
    stats_.exchange_depth = depth_;
    *go = all[0] == 0 && all[1] != 0;
    if (all[0] == 0) return Status::Ok();
    return StopTogether(local.ok() ? UnavailableError("{}: another node leader failed before the "
                                                      "stream started (its rank printed the "
                                                      "cause); stopping node {}", who_,
                                                      config_.node_index)
                                   : local);
  }

  // A stop or failure of this node: it still takes part, its flags say so.
  void NoteLocalError(const Status& st) {
    if (local_error_.ok()) local_error_ = st;
  }
  // The agreement decided that no batch at `index` or later is started.
  bool Stopped(uint64_t index) const {
    return stop_at_ != UINT64_MAX && index >= stop_at_ + uint64_t(depth_);
  }
  size_t in_flight() const { return in_flight_.size(); }
  uint64_t next_index() const { return index_; }

  // Batch index - depth must be finished (its flags read) before batch index starts; then
  // every leader decides from the same flags whether it starts at all.
  Status Advance() {
    while (!in_flight_.empty() && in_flight_.front()->index + uint64_t(depth_) <= index_)
      BC_RETURN_IF_ERROR(FinishOldest());
    return Status::Ok();
  }

  Result<std::optional<uint64_t>> Produce(const Position& p, std::span<const int64_t> part,
                                          uint64_t only, const AcquireWait&, int64_t) override {
    if (!part.empty())
      return FailedPreconditionError("{}: replicated batches are not cut into parts", who_);
    BC_RETURN_IF_ERROR(StartReplicated(p, index_++));
    return std::optional<uint64_t>(only);  // published in order as the exchanges complete
  }

  // Finishes every exchange in flight; the first failure every leader knows of stops them
  // together (each report printed first). Once.
  Status Drain() override {
    if (drained_) return drain_status_;
    drained_ = true;
    drain_status_ = DrainOnce();
    return drain_status_;
  }

 private:
  struct InFlight {
    shm::SlotWrite w;
    // The plan's batch: image size, layout and descriptor (its samples only while starting).
    ProduceRequest req;
    int64_t n = 0;                   // samples of the producer batch
    uint64_t index = 0;              // producer batches started before it in this run
    std::vector<int64_t> meta;       // one block per node: flags, labels, ids of its share
    mpi::BatchExchange exchange;
    bool done = false;
    int64_t posted_ns = 0;
    int64_t wait_ns = 0;             // the leader blocked waiting for this exchange
    BatchRecord record;              // this node's fills of its share (telemetry)
    std::vector<uint8_t> scratch;    // after a local failure: stands in for the slot
    uint8_t* data = nullptr;         // the slot's memory (or scratch)
  };

  Status DrainOnce() {
    while (!in_flight_.empty()) BC_RETURN_IF_ERROR(FinishOldest());
    if (stop_failed_)
      return StopTogether(!local_error_.ok()
                              ? local_error_
                              : UnavailableError("{}: node leader {} (rank {}) failed (its rank "
                                                 "printed the cause); stopping node {}", who_,
                                                 failed_node_, failed_rank_, config_.node_index));
    if (!local_error_.ok()) return local_error_;
    if (stop_at_ != UINT64_MAX)
      BC_LOG(Info, Node, "{}: no consumer left on any node after producer batch {}; ending", who_,
             stop_at_);
    return Status::Ok();
  }

  // The stream stops for a failure every leader knows of: prints `why` (the failing leader
  // its cause, the others the failing leader's node and rank), waits until every leader has
  // printed, and returns `why`. Only then may a leader fail its ring (its trainers exit and
  // the launcher ends the job), so no report is lost to an early exit (docs/multinode.md).
  Status StopTogether(const Status& why) {
    log::Report(log::kNode, fmt::format("{} of node {}: {}", who_, config_.node_index,
                                        why.message()));
    reported_ = true;
    BC_MPI(MPI_Barrier(config_.leaders), "MPI_Barrier (node leaders: every report printed "
                                         "before the stream fails)");
    return why;
  }

  // Acquires the slot of batch `index` (progressing the exchanges in flight while it waits),
  // decodes this node's share into it slice by slice (progressing between slices), and posts
  // its exchange. After a local failure it still takes part, from scratch memory, with its
  // failed flag set, so that the other leaders' messages find their matches.
  Status StartReplicated(const Position& p, uint64_t index) {
    auto f = std::make_unique<InFlight>();
    f->req = plan_->Request(p, p.k);
    f->index = index;
    const uint64_t epoch = p.epoch;
    const int64_t k = p.k;
    shm::RingLeader& ring = writer_->ring();
    // After a stop is known (the batches still started then are drained, never published) or
    // a local failure, the batch goes through scratch memory: its slot position may be taken.
    if (local_error_.ok() && stop_at_ == UINT64_MAX) {
      // While the slot is held, progress the exchanges in flight (polling 1 ms while any is
      // pending). An error of Progress() fails the run; an acquire failure is local.
      Status progress;
      AcquireWait wait;
      wait.poll_ms = [this] {
        const bool pending = std::any_of(in_flight_.begin(), in_flight_.end(),
                                         [](const auto& x) { return !x->done; });
        return pending ? int64_t(1) : int64_t(-1);
      };
      wait.on_timeout = [this, &progress]() -> Result<bool> {
        progress = Progress();
        return !progress.ok();
      };
      auto w = writer_->Acquire(ring.next_seq() + in_flight_.size(), wait);
      BC_RETURN_IF_ERROR(progress);
      if (w.ok() && *w) {
        f->w = **w;
        f->data = f->w.data;
      } else if (!w.ok()) {
        local_error_ = w.status();
      }
    }
    if (f->data == nullptr) {
      f->scratch.resize(ring.config().slot_bytes);
      f->data = f->scratch.data();
    }
    const std::span<const int64_t> samples = f->req.samples;
    f->req.samples = {};  // the plan's epoch may change while the exchange is in flight
    f->n = static_cast<int64_t>(samples.size());
    const int N = config_.num_nodes, me = config_.node_index;
    const SampleRange mine = ReplicateShare(f->n, N, me);
    int64_t* ids = writer_->layout().ids(f->data);
    int64_t* labels = writer_->layout().labels(f->data);
    // Slices of at least 2 samples per decode thread, so a slice keeps the workers busy.
    const int64_t min_slice = std::max(2, 2 * source_->threads());
    const int slices = static_cast<int>(std::clamp<int64_t>(mine.count / min_slice, 1,
                                                            std::max(1, config_.decode_slices)));
    for (int c = 0; c < slices; ++c) {
      const SampleRange r = ChunkOf(mine, slices, c);
      if (local_error_.ok() && stop_at_ == UINT64_MAX) {
        uint32_t written = 0;
        Status st = writer_->Fill(*source_, epoch, f->req.image_size,
                                  samples.subspan(size_t(r.begin), size_t(r.count)), f->req.sample,
                                  f->data, r.begin, &f->record, &written);
        if (!st.ok())
          local_error_ = st.WithContext(fmt::format("{}: epoch {} producer batch {}", who_, epoch, k));
      } else {
        std::fill(ids + r.begin, ids + r.begin + r.count, int64_t(-1));
      }
      if (c + 1 < slices) BC_RETURN_IF_ERROR(Progress());
    }
    // This node's metadata block; the others' blocks are received at their offsets. A block
    // has room for a whole slot's samples, so a peer that planned a larger share is caught by
    // the check of its header (CheckPeer) instead of failing the receive.
    const int64_t stride = MetaStride();
    const uint64_t sb = f->req.sample.bytes();
    f->meta.assign(size_t(stride) * size_t(N), 0);
    int64_t* block = f->meta.data() + size_t(stride) * size_t(me);
    block[kFailed] = local_error_.ok() ? 0 : 1;
    block[kHasConsumers] = (ring.CountMembers(shm::MemberState::kActive) +
                            ring.CountMembers(shm::MemberState::kJoining)) > 0 ? 1 : 0;
    block[kRank] = config_.rank;
    block[kCount] = mine.count;
    block[kEpoch] = static_cast<int64_t>(epoch);
    block[kPosition] = k;
    block[kBatchSamples] = f->n;
    block[kImageSize] = f->req.image_size;
    block[kSampleBytes] = static_cast<int64_t>(sb);
    std::copy(labels + mine.begin, labels + mine.begin + mine.count, block + kMetaHeader);
    std::copy(ids + mine.begin, ids + mine.begin + mine.count, block + kMetaHeader + mine.count);
    // Each batch's shares are sized by its own samples and image size (with a schedule they
    // change from batch to batch); a receive may take up to the end of the slot's images.
    mpi::ExchangeArray arrays[2];
    arrays[0].base = f->data;
    arrays[1].base = reinterpret_cast<uint8_t*>(f->meta.data());
    const uint64_t images_room = writer_->layout().images_bytes;
    for (int j = 0; j < N; ++j) {
      const SampleRange r = ReplicateShare(f->n, N, j);
      arrays[0].counts.push_back(uint64_t(r.count) * sb);
      arrays[0].displs.push_back(uint64_t(r.begin) * sb);
      arrays[0].room.push_back(images_room - std::min(images_room, arrays[0].displs.back()));
      arrays[1].counts.push_back(uint64_t(kMetaHeader + 2 * r.count) * sizeof(int64_t));
      arrays[1].displs.push_back(uint64_t(stride) * uint64_t(j) * sizeof(int64_t));
      arrays[1].room.push_back(uint64_t(stride) * sizeof(int64_t));
    }
    BC_RETURN_IF_ERROR(f->exchange.Start(config_.leaders, arrays, kTagBase).WithContext(who_));
    f->posted_ns = shm::MonotonicNs();
    if (in_flight_.empty()) busy_since_ = f->posted_ns;
    in_flight_.push_back(std::move(f));
    return Progress();
  }

  // int64 entries of one node's metadata block: the header and a whole slot's labels and ids.
  int64_t MetaStride() const {
    return kMetaHeader + 2 * static_cast<int64_t>(writer_->layout().capacity_samples);
  }

  // Whether node j's block of batch f says what this node's plan says of the batch (and its
  // messages are the sizes the header says): else the node leaders plan different streams
  // (e.g. other options, another dataset), and the batch's bytes must not be read.
  Status CheckPeer(const InFlight& f, int j, const int64_t* block) const {
    const SampleRange r = ReplicateShare(f.n, config_.num_nodes, j);
    const int64_t sb = static_cast<int64_t>(f.req.sample.bytes());
    const uint64_t meta_got = f.exchange.received(1, j);
    const bool header = meta_got >= uint64_t(kMetaHeader) * sizeof(int64_t);
    if (header && block[kEpoch] == int64_t(f.req.contents.epoch) &&
        block[kPosition] == f.req.contents.batch && block[kBatchSamples] == f.n &&
        block[kCount] == r.count && block[kImageSize] == f.req.image_size &&
        block[kSampleBytes] == sb &&
        meta_got == uint64_t(kMetaHeader + 2 * r.count) * sizeof(int64_t) &&
        f.exchange.received(0, j) == uint64_t(r.count * sb))
      return Status::Ok();
    const std::string mine = fmt::format(
        "producer batch {} of epoch {}: {} samples, a share of {} at image size {} ({} bytes "
        "per sample)", f.req.contents.batch, f.req.contents.epoch, f.n, r.count,
        f.req.image_size, sb);
    const std::string theirs =
        !header ? fmt::format("a metadata block of {} bytes", meta_got)
                : fmt::format("producer batch {} of epoch {}: {} samples, a share of {} at "
                              "image size {} ({} bytes per sample; {} image bytes sent)",
                              block[kPosition], block[kEpoch], block[kBatchSamples],
                              block[kCount], block[kImageSize], block[kSampleBytes],
                              f.exchange.received(0, j));
    return FailedPreconditionError(
        "{}: node leader {} (rank {}) sent {}, but node {}'s plan has {}: the node leaders plan "
        "different streams and this batch's bytes cannot be read. Give every rank the same "
        "options (dataset, limit_samples, seed, shuffle, epochs, batch sizes, resize, "
        "image_size and the image options)", who_, j, header ? block[kRank] : -1, theirs,
        config_.node_index, mine);
  }

  // Tests every in-flight exchange and finishes the completed ones at the front, in order.
  Status Progress() {
    for (auto& f : in_flight_)
      if (!f->done) BC_RETURN_IF_ERROR(f->exchange.Test(&f->done).WithContext(who_));
    while (!in_flight_.empty() && in_flight_.front()->done) {
      BC_RETURN_IF_ERROR(FinishReplicated(in_flight_.front().get()));
      in_flight_.pop_front();
    }
    if (in_flight_.empty()) NoteExchangeIdle();
    return Status::Ok();
  }

  // Waits for the oldest exchange and finishes it (reads the flags, publishes unless stopped).
  Status FinishOldest() {
    InFlight* f = in_flight_.front().get();
    if (!f->done) {
      const int64_t t0 = shm::MonotonicNs();
      BC_RETURN_IF_ERROR(f->exchange.Wait().WithContext(who_));
      f->wait_ns = shm::MonotonicNs() - t0;
      stats_.exchange_wait_ns += f->wait_ns;
      f->done = true;
    }
    BC_RETURN_IF_ERROR(FinishReplicated(f));
    in_flight_.pop_front();
    if (in_flight_.empty()) NoteExchangeIdle();
    return Status::Ok();
  }

  void NoteExchangeIdle() {
    if (busy_since_ < 0) return;
    stats_.exchange_ns += shm::MonotonicNs() - busy_since_;
    busy_since_ = -1;
  }

  // Reads every node's flags for the batch (the agreement) and checks every node's header
  // against this node's plan; then, unless the stream stops at or before it, copies the
  // other nodes' labels and ids into the slot, compacts skipped samples away (the same on
  // every node) and publishes.
  Status FinishReplicated(InFlight* f) {
    const int64_t done_ns = shm::MonotonicNs();
    const int N = config_.num_nodes;
    const int64_t stride = MetaStride();
    stats_.exchange_bytes += f->exchange.bytes_received();
    if (collector_ != nullptr) {
      collector_->Add(telemetry::Counter::kBytesMpi, f->exchange.bytes_received());
      // The stage time is what the exchange cost this leader (blocked waiting for it); the
      // span shows the whole time it was in flight, overlapping the decode of later batches.
      collector_->AddTime(telemetry::Timer::kExchange, f->wait_ns);
      collector_->Span(telemetry::SpanKind::kExchange, f->w.seq, f->posted_ns, done_ns);
    }
    bool any_failed = false, any_consumers = false;
    Status mismatch;
    for (int j = 0; j < N; ++j) {
      const int64_t* block = f->meta.data() + size_t(stride) * size_t(j);
      if (j != config_.node_index && mismatch.ok()) mismatch = CheckPeer(*f, j, block);
      if (block[kFailed] != 0 && !any_failed) {
        any_failed = true;
        if (stop_at_ == UINT64_MAX || !stop_failed_)
          failed_rank_ = int(block[kRank]), failed_node_ = j;
      }
      any_consumers = any_consumers || block[kHasConsumers] != 0;
    }
    // Plans that differ are seen by every node at the same batch (each checks every other's
    // header), so all stop there together, failing, as after a leader's failure.
    if (!mismatch.ok()) {
      NoteLocalError(mismatch);
      any_failed = true;
    }
    if ((any_failed || !any_consumers) && stop_at_ == UINT64_MAX) {
      stop_at_ = f->index;
      stop_failed_ = any_failed;
    }
    if (stop_at_ <= f->index || !local_error_.ok()) return Status::Ok();  // not published
    int64_t* labels = writer_->layout().labels(f->data);
    int64_t* ids = writer_->layout().ids(f->data);
    for (int j = 0; j < N; ++j) {
      if (j == config_.node_index) continue;
      const SampleRange r = ReplicateShare(f->n, N, j);
      const int64_t* block = f->meta.data() + size_t(stride) * size_t(j);
      std::copy(block + kMetaHeader, block + kMetaHeader + r.count, labels + r.begin);
      std::copy(block + kMetaHeader + r.count, block + kMetaHeader + 2 * r.count, ids + r.begin);
    }
    const pipeline::SampleLayout& sample = f->req.sample;
    const uint32_t published = Compact(f->data, static_cast<uint32_t>(f->n), sample.bytes());
    SlotContents c = f->req.contents;  // epoch, position, with a schedule its size and scaling
    c.num_samples = published;
    c.skipped = static_cast<uint32_t>(f->n) - published;
    c.layout = sample;
    BC_RETURN_IF_ERROR(writer_->Publish(f->w, c, ~0ULL, f->record).status());
    if (c.batch + 1 != c.batches_in_epoch) return Status::Ok();
    stats_.epoch_end_ns.push_back(shm::MonotonicNs());
    // Every node publishes the same batches, so every node finds an epoch without a good
    // sample at the same batch and fails the same way.
    return writer_->EndEpoch(c.epoch);
  }

  // Removes positions whose id is -1 (samples skipped on some node), keeping the order.
  // Every node does the same on the same data, so all nodes publish the same batch.
  uint32_t Compact(uint8_t* data, uint32_t n, uint64_t sb) {
    int64_t* labels = writer_->layout().labels(data);
    int64_t* ids = writer_->layout().ids(data);
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

  std::unique_ptr<BatchSource> source_;
  ExchangeConfig config_;
  std::string who_;
  std::unique_ptr<BatchPlan> plan_;
  FeedStats stats_;
  std::deque<std::unique_ptr<InFlight>> in_flight_;
  int depth_ = 1;
  uint64_t index_ = 0;               // producer batches started in this run
  Status local_error_;               // this node's first failure (decode, abort)
  uint64_t stop_at_ = UINT64_MAX;    // first batch index whose flags say stop
  bool reported_ = false;
  bool stop_failed_ = false;         // ... because a leader failed (else: no consumers left)
  int failed_rank_ = -1, failed_node_ = -1;
  int64_t busy_since_ = -1;          // an exchange has been in flight since (ns)
  bool drained_ = false;
  Status drain_status_;
};

// Every node publishes the same positions: joiners start at the next epoch (no replay: all
// nodes must publish the same positions), and the stream ends when the leaders agree.
class ReplicateDistribution final : public Distribution {
 public:
  explicit ReplicateDistribution(ExchangeFeed* feed) : feed_(feed) {}
  const char* name() const override { return "replicate"; }
  bool late_join() const override { return false; }

  Status Start(const Status& joined) override {
    parts_.admission->AdmitJoiners(parts_.ring->next_seq(), 0, 1);
    bool go = false;
    BC_RETURN_IF_ERROR(feed_->Agree(joined, parts_.admission->Attached() > 0, &go));
    if (!go) {
      BC_LOG(Info, Node, "{}: no consumer on any node; ending", parts_.who);
      ended_ = true;
    }
    return Status::Ok();
  }
  Status CheckStop(const Status& stop) override {
    if (!stop.ok()) feed_->NoteLocalError(stop);  // the flags tell the others; all stop together
    return Status::Ok();
  }
  Result<Settled> Settle(int64_t k, int64_t bpe, int64_t first) override {
    BC_RETURN_IF_ERROR(feed_->Advance());
    if (ended_ || feed_->Stopped(feed_->next_index())) return Settled{Step::kEnd, 0};
    // Joiners are admitted at once and start at the next epoch (its first position); a
    // stream resumed mid-epoch admits its first joiners at its first position.
    parts_.admission->AdmitJoiners(parts_.ring->next_seq() + feed_->in_flight(), k - first,
                                   bpe - first);
    return Settled{Step::kProduce, 0};
  }
  Result<std::optional<uint64_t>> Produce(const Position& p, uint64_t, const AcquireWait& wait,
                                          int64_t next_k) override {
    return feed_->Produce(p, {}, ~0ULL, wait, next_k);
  }

 private:
  ExchangeFeed* feed_;
  bool ended_ = false;
};

}  // namespace

std::pair<std::unique_ptr<Feed>, std::unique_ptr<Distribution>> MakeReplicateAcrossNodes(
    std::unique_ptr<BatchSource> source, const ExchangeConfig& config) {
  auto feed = std::make_unique<ExchangeFeed>(std::move(source), config);
  auto dist = std::make_unique<ReplicateDistribution>(feed.get());
  return {std::move(feed), std::move(dist)};
}

}  // namespace batchcast::producer
