// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Where a consumer starts: attaching its ring (waiting for a leader to listen), its shard
// (mode=shard), its resume point and epoch budget (start_epoch / start_batch /
// start_run_epoch), and moving it before its first batch (load_state_dict).
#include <algorithm>
#include <chrono>
#include <thread>

#include "batchcast/consumer.h"
#include "core/environment.h"
#include "core/errors.h"
#include "core/log.h"
#include "node/consumer_core.h"
#include "node/consumer_internal.h"
#include "transport/shm/control.h"
#include "transport/shm/ring_consumer.h"

namespace batchcast::internal {
namespace {

// Resume: the sample of the epoch's global order this consumer starts at.
uint64_t ResumeSample(const Options& o, uint32_t shard_world) {
  return static_cast<uint64_t>(o.start_batch) * static_cast<uint64_t>(o.batch_size) *
         shard_world;
}

// What this consumer's first membership receives of the position (epoch, sample of the
// epoch): the first position addressed to it (published, still pending for it) is at or
// before it (kCovers: it skips to the position as on any leader) or after it (kPassed: only
// a replay gives it), or nothing was published to it yet (kUnknown).
enum class FirstJoin { kCovers, kPassed, kUnknown };
FirstJoin FirstJoinSees(const shm::RingConsumer& ring, uint64_t epoch, uint64_t sample) {
  const shm::SegmentView& v = ring.view();
  const uint64_t start = v.control->consumers[ring.id()].start_seq.load();
  const uint64_t published = v.stream->published.load();
  const uint64_t bit = 1ULL << ring.id();
  for (uint64_t seq = start; start != shm::kNoSeq && seq < published &&
                             seq < start + shm::kPositionTable; ++seq) {
    const uint64_t entry = v.position(seq).load();
    const uint32_t slot = shm::PositionSlot(entry);
    if (shm::PositionSeq(entry) != seq || slot >= v.geo.max_slots) continue;
    if ((v.pending(slot).load() & bit) == 0) continue;  // not ours
    const shm::SlotDesc& d = v.slot(slot).desc;
    const bool covers = d.epoch < epoch ||
                        (d.epoch == epoch && d.batch_in_epoch * v.stream->producer_batch <= sample);
    return covers ? FirstJoin::kCovers : FirstJoin::kPassed;
  }
  return FirstJoin::kUnknown;
}

// Whether a consumer that loaded a position joins again with it (the leader then settles it,
// replaying what its stream has passed). Not when its first membership receives the position
// anyway. A stream that runs until stopped (a service) is joined again otherwise; a stream
// that ends (epochs) only once its first membership is known to be past the position: joined
// again before that, the stream could move on or end before the new membership is settled
// (a resume from an earlier epoch then misses the stream's current one).
bool JoinAgainAt(const shm::RingConsumer& ring, uint64_t epoch, uint64_t sample) {
  const FirstJoin seen = FirstJoinSees(ring, epoch, sample);
  if (seen == FirstJoin::kCovers) return false;
  return seen == FirstJoin::kPassed || ring.header()->stream_epochs == 0;
}

// The consumer's own epoch at its start position (options start_run_epoch; -1: start_epoch).
int RunEpochAtStart(const Options& o) {
  return o.start_run_epoch >= 0 ? o.start_run_epoch : o.start_epoch;
}

}  // namespace

// Attaches the ring, waiting up to `timeout_ms` for a leader to listen on `address` (a
// trainer may start before its leader); every other failure returns at once.
Result<std::unique_ptr<shm::RingConsumer>> AttachRing(const std::string& address,
                                                      const shm::ConsumerConfig& cfg,
                                                      int64_t timeout_ms) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::milliseconds(5);
  for (int attempt = 1;; ++attempt) {
    auto ring = shm::RingConsumer::Attach(address, cfg);
    if (ring.ok() || !shm::NoListener(ring.status())) return ring;
    if (std::chrono::steady_clock::now() >= deadline) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                          start).count();
      return MakeError(StatusCode::kUnavailable,
                       "consumer: waited {:.1f}s ({} attempts, connect_timeout={}ms) for a "
                       "Batchcast leader at {}: {}. Start the leader (or batchcast serve) "
                       "first, check the address, or raise connect_timeout",
                       waited, attempt, timeout_ms, shm::DisplayAddress(address),
                       ring.status().message());
    }
    std::this_thread::sleep_for(pause);  // a retry interval, not synchronisation
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

// mode=shard: this consumer's rank and world size, from the options or RANK / WORLD_SIZE
// (h: the leader's header, for the carving check; null before attaching).
Status ResolveShard(const Options& o, const shm::StreamHeader* h, uint32_t* world,
                    uint32_t* rank) {
  *world = 1, *rank = 0;
  if (o.mode != "shard") {
    if (o.rank >= 0 || o.world_size > 0)
      return InvalidArgumentError(
          "options 'rank'/'world_size' are set but mode={}: they only choose a shard. Set "
          "mode=shard for data-parallel training, or unset them", o.mode);
    return Status::Ok();
  }
  auto from_env = [](env::Var var, int given, int* out) -> Status {
    if (given >= 0) {
      *out = given;
      return Status::Ok();
    }
    auto x = env::GetInt(var, 0, 1 << 30);
    if (!x.ok() || !x->has_value())
      return InvalidArgumentError(
          "mode=shard needs this consumer's rank and world size: set options 'rank' and "
          "'world_size', or RANK and WORLD_SIZE in the environment (torchrun and batchcast-run "
          "set them); {}", x.ok() ? fmt::format("{} is not set", env::Name(var))
                                  : x.status().message());
    *out = static_cast<int>(**x);
    return Status::Ok();
  };
  int w = 0, r = 0;
  BC_RETURN_IF_ERROR(from_env(env::Var::kWorldSize, o.world_size > 0 ? o.world_size : -1, &w));
  BC_RETURN_IF_ERROR(from_env(env::Var::kRank, o.rank, &r));
  if (w < 1 || r >= w)
    return InvalidArgumentError("mode=shard: rank {} is not in a world of {} ranks", r, w);
  if (w > 1 && (o.carve_offset || o.carve_shuffle || (h != nullptr && h->resize_spec[0])))
    return InvalidArgumentError(
        "mode=shard cuts the epoch into global batches of world_size x batch_size and cannot "
        "be combined with {}; unset it", h != nullptr && h->resize_spec[0] ? "the leader's progressive "
        "resizing" : "carve_offset / carve_shuffle");
  *world = static_cast<uint32_t>(w), *rank = static_cast<uint32_t>(r);
  return Status::Ok();
}

// Resume (options start_epoch / start_batch / start_run_epoch) and this consumer's epoch
// budget: the epochs of its run not done yet, counted from its own epoch, not the stream's.
Status StartConsumerAt(const Options& o, const shm::StreamHeader* h, ConsumerCore* c) {
  const int run = RunEpochAtStart(o);
  c->epoch_budget = o.epochs >= kEpochsUntilStreamEnds ? o.epochs : o.epochs - run;
  c->run_epoch0 = static_cast<uint64_t>(run);
  c->SetNextLocked(static_cast<uint64_t>(o.start_epoch), static_cast<uint64_t>(o.start_batch));
  if (o.start_epoch == 0 && o.start_batch == 0) return Status::Ok();
  if (c->epoch_budget <= 0 && o.start_run_epoch >= 0)
    return InvalidArgumentError("option 'start_run_epoch' ({}) must be below 'epochs' ({}): "
                                "epochs counts the whole run, start_run_epoch the epochs of it "
                                "done where it resumes", run, o.epochs);
  if (c->epoch_budget <= 0)
    return InvalidArgumentError("option 'start_epoch' ({}) must be below 'epochs' ({}): epochs "
                                "counts the whole run, start_epoch where it resumes",
                                o.start_epoch, o.epochs);
  // A stream that ends: it must still have the epochs this consumer needs from its position
  // (more than epochs - start_epoch when a replay moved it onto later stream epochs).
  if (h->stream_epochs > 0 && o.epochs < kEpochsUntilStreamEnds &&
      static_cast<uint64_t>(o.start_epoch) + static_cast<uint64_t>(c->epoch_budget) >
          h->stream_epochs)
    return FailedPreconditionError(
        "consumer: resumes at stream epoch {} with {} of its {} epochs done (start_run_epoch), "
        "so it needs {} more epochs of the stream, through epoch {}, but the leader's stream "
        "ends after epoch {}: it would end early with a silently shorter run. Start the leader "
        "with epochs >= {} (and start_epoch {}), or resume the trial from a batchcast serve "
        "service", o.start_epoch, run, o.epochs, c->epoch_budget,
        o.start_epoch + c->epoch_budget - 1, h->stream_epochs - 1,
        o.start_epoch + c->epoch_budget, o.start_epoch);
  if (o.start_batch > 0 && (o.carve_offset || o.carve_shuffle || h->resize_spec[0]))
    return InvalidArgumentError(
        "option 'start_batch' counts exact batches of batch_size, but {} carves each producer "
        "batch on its own; resume these at an epoch start (start_batch=0)",
        h->resize_spec[0] ? "progressive resizing" : "carve_offset / carve_shuffle");
  c->resuming = true;
  c->resume_epoch = static_cast<uint64_t>(o.start_epoch);
  c->resume_pos = ResumeSample(o, c->shard_world);
  return Status::Ok();
}

// The join's resume point (a service replays what its stream has passed).
void SetJoinResume(const Options& o, uint32_t shard_world, shm::ConsumerConfig* cfg) {
  cfg->resumes = o.start_epoch != 0 || o.start_batch != 0;
  cfg->resume_epoch = static_cast<uint64_t>(o.start_epoch);
  cfg->resume_sample = ResumeSample(o, shard_world);
}

Status ConsumerAccess::StartAt(Consumer& consumer, StreamPosition position) {
  ConsumerCore& c = *consumer.core_;
  if (const int64_t n = consumer.BatchesPerEpoch(position.epoch);
      n > 0 && position.batch >= static_cast<uint64_t>(n))
    return InvalidArgumentError(
        "consumer: position epoch {} batch {} does not exist: that epoch has {} batches of "
        "batch_size {} (batches 0..{}); a position saved by this consumer's options is always "
        "inside its epoch", position.epoch, position.batch, n, c.options.batch_size, n - 1);
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.in_next || c.admitted || c.first_epoch != ~0ULL || c.finished)
    return FailedPreconditionError(
        "consumer: cannot move to epoch {} batch {}: it has already {} (next: epoch {} batch "
        "{}), and a shared stream does not rewind or jump for one consumer. Load a saved "
        "position before the first batch (right after attaching), or attach a new consumer "
        "with it (start_epoch / start_batch; Python: Consumer(..., **state))",
        position.epoch, position.batch, c.finished ? "left the stream" : "asked for batches",
        c.next_position.epoch, c.next_position.batch);
  Options o = c.options;
  o.start_epoch = static_cast<int>(position.epoch);
  o.start_batch = static_cast<int64_t>(position.batch);
  o.start_run_epoch = static_cast<int>(position.run_epoch);
  BC_RETURN_IF_ERROR(ValidateOptions(o));
  const auto budget = c.epoch_budget;
  const auto run0 = c.run_epoch0;
  const auto next = c.next_position;
  c.resuming = false;
  if (Status st = StartConsumerAt(o, c.ring->header(), &c); !st.ok()) {
    c.epoch_budget = budget;  // unchanged: still at its attach position
    c.run_epoch0 = run0;
    c.next_position = next;
    c.resuming = c.options.start_epoch != 0 || c.options.start_batch != 0;
    return st;
  }
  if ((c.ring->leader_features() & shm::kLeaderReplaysResume) != 0 &&
      JoinAgainAt(*c.ring, position.epoch, ResumeSample(o, c.shard_world))) {
    // The leader settles a resume point at admission (it may replay what its stream has
    // passed): join again with it. Nothing was received yet, so nothing is lost.
    // The first membership is kept until the second is in: a stream that ends with its
    // consumers never sees none. A stream that ended meanwhile (it had published its rest
    // into the ring) refuses the join: the first membership holds every batch still to come,
    // so it stays, and the batches before the position are skipped as on any leader.
    shm::ConsumerConfig cfg = c.ring->config();
    SetJoinResume(o, c.shard_world, &cfg);
    auto ring = AttachRing(c.address, cfg, o.connect_timeout);
    if (ring.ok()) {
      c.ring = std::move(ring).value();
    } else if (ring.status().code() == StatusCode::kUnavailable && c.ring->header() != nullptr &&
               c.ring->header()->stream_state.load() !=
                   static_cast<uint32_t>(shm::StreamState::kRunning)) {
      BC_LOG(Info, Node, "consumer: the stream ended before it could join again at epoch {} "
             "batch {}; it reads on from its first join", position.epoch, position.batch);
      c.rejoin_after_end = true;
    } else {
      c.status = ring.status().WithContext("consumer: joining again at the loaded position");
      return c.status;
    }
  }
  c.options = o;
  return Status::Ok();
}

}  // namespace batchcast::internal
