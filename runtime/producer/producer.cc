// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/producer.h"

#include <unistd.h>

#include <algorithm>

#include "core/errors.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "producer/batch_stage.h"
#include "producer/epoch_loop.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "transport/shm/control.h"
#include "transport/shm/futex.h"

namespace batchcast::producer {

std::string NewSocketName(const std::string& kind) {
  static std::atomic<int> counter{0};
  return fmt::format("batchcast-{}-{}-{}-{}", getuid(), getpid(), kind, counter.fetch_add(1));
}

Result<std::unique_ptr<Producer>> Producer::Create(const ProducerConfig& config,
                                                   std::unique_ptr<Feed> feed,
                                                   std::unique_ptr<Distribution> distribution) {
  std::unique_ptr<Producer> p(new Producer(config));
  BC_RETURN_IF_ERROR(p->Assemble(std::move(feed), std::move(distribution)));
  return p;
}

Result<std::unique_ptr<Producer>> Producer::Create(const ProducerConfig& config,
                                                   std::unique_ptr<BatchSource> source) {
  return Create(config, MakePipelineFeed(std::move(source), config.print_plan),
                MakeLocalDistribution());
}

// The kind of process a producer's own telemetry files are named for (run_outputs.h).
static telemetry::ProcessKind TelemetryKind(const std::optional<FrontDoor>& door) {
  if (door == FrontDoor::kServe) return telemetry::ProcessKind::kService;
  if (door == FrontDoor::kPythonProducer) return telemetry::ProcessKind::kProducer;
  return telemetry::ProcessKind::kLeader;
}

Result<std::shared_ptr<ProcessTelemetry>> StartTelemetry(const ProducerConfig& config) {
  if (config.collector != nullptr) return std::shared_ptr<ProcessTelemetry>();
  BC_ASSIGN_OR_RETURN(std::unique_ptr<ProcessTelemetry> t,
                      ProcessTelemetry::Start(config.options, TelemetryKind(config.front_door),
                                              config.rank, config.local_rank,
                                              telemetry::Role::kLeader, config.telemetry_tag));
  return std::shared_ptr<ProcessTelemetry>(std::move(t));
}

// Why a producer of this feed and distribution cannot replay a passed position to a consumer
// resuming there, and what its user does instead ("" when it can).
static std::string ResumeRefusal(const Feed& feed, const Distribution& dist) {
  if (!dist.late_join())
    return fmt::format(
        "this leader ({} across nodes) publishes the same positions on every node in step and "
        "cannot replay a passed one to a single trainer. Resume the whole job at this position "
        "(options start_epoch / start_batch on every rank)", dist.name());
  if (feed.resize_schedule() != nullptr)
    return "this leader runs a resize schedule, planned one epoch at a time: it remakes a "
           "passed batch only for a late joiner of the current epoch. Resume at an epoch start "
           "the stream has not passed, or restart the leader at that epoch (start_epoch)";
  if (feed.replay() != Replay::kAny)
    return fmt::format(
        "this leader's batches come from its {}, which cannot make a passed batch again. "
        "Start it at (or before) this position (its options start_epoch / start_batch), or "
        "resume from a leader of the native pipeline (batchcast serve, batchcast.Leader, the "
        "MPI Runtime, batchcast-run), which replays it to the resuming consumer alone",
        feed.name());
  return std::string();
}

Status CheckConfig(const ProducerConfig& config) {
  const Options& o = config.options;
  const std::string& who = config.who;
  if (config.front_door) {
    BC_RETURN_IF_ERROR(ValidateOptions(o).WithContext(who));
    BC_RETURN_IF_ERROR(CheckFrontDoorOptions(o, *config.front_door));
  }
  if (!config.until_stopped && o.start_epoch >= o.epochs)
    return InvalidArgumentError("{}: option 'start_epoch' ({}) must be below 'epochs' ({}): "
                                "epochs counts the whole run, start_epoch where it resumes",
                                who, o.start_epoch, o.epochs);
  // A schedule is planned over the run: upgrades per epoch, its last final_epochs at full
  // size, and every consumer rebuilds its batch counts from (spec, epochs).
  if (config.until_stopped && !o.resize.empty())
    return InvalidArgumentError(
        "{}: option 'resize' plans progressive resizing over the run's epochs (samples move up "
        "a size each epoch, the last final_epochs train at full size), but this stream runs "
        "until stopped: no 'epochs' was given. Give the run's epochs (batchcast serve --epochs "
        "N, BATCHCAST_EPOCHS=N or epochs = N in the config file), or unset 'resize'", who);
  return Status::Ok();
}

// Options check, sizing, ring, writer, admission: the assembly every front door shares.
Status Producer::Assemble(std::unique_ptr<Feed> feed, std::unique_ptr<Distribution> dist) {
  const Options& o = config_.options;
  const std::string& who = config_.who;
  BC_RETURN_IF_ERROR(CheckConfig(config_));
  if (config_.socket_name.empty()) config_.socket_name = NewSocketName(who);
  collector_ = config_.collector;
  if (collector_ == nullptr) {
    telemetry_ = std::move(config_.telemetry);
    if (telemetry_ == nullptr) {
      BC_ASSIGN_OR_RETURN(telemetry_, StartTelemetry(config_));
    }
    if (telemetry_ != nullptr) collector_ = telemetry_->collector();
  }
  // The feed plans with the distribution's view of the options (shard: the global batch).
  Options plan_options = o;
  const uint32_t max_b = config_.max_consumer_batch > 0 ? config_.max_consumer_batch
                                                        : static_cast<uint32_t>(o.batch_size);
  dist->PlanOptions(max_b, &plan_options);
  BC_RETURN_IF_ERROR(feed->Plan(plan_options, config_.max_consumer_batch, who, &plan_));
  const int64_t slot_samples = dist->SlotSamples(plan_);
  SlotLayout slot =
      ComputeSlotLayout(slot_samples, plan_.max_consumer_batch, plan_.sample, plan_.buckets);
  BC_RETURN_IF_ERROR(AddTensors(plan_.tensors, who, &slot));
  std::vector<std::unique_ptr<BatchStage>> stages;
  if (plan_.stages)
    BC_RETURN_IF_ERROR(PrepareStages(o.stage, plan_.sample, plan_.stage_sizes, slot_samples,
                                     o.threads, who, &slot, &stages));
  else if (!o.stage.empty())
    return InvalidArgumentError("{}: option 'stage' runs a model on the native pipeline's "
                                "batches; the {} has none", who, feed->name());
  ViewGroupsConfig groups;
  BatchSource* view_source = nullptr;
  BC_RETURN_IF_ERROR(PlanViews(*feed, &slot, &groups, &view_source));
  shm::RingConfig rc = RingConfigFor(
      slot, RingSlots(o) * static_cast<uint32_t>(dist->PartsPerPosition()),
      plan_.max_consumer_batch, static_cast<uint64_t>(slot_samples), dist->EpochSamples(plan_),
      config_.until_stopped ? 0 : o.epochs);
  rc.resize_spec = plan_.resize_spec;
  rc.socket_name = config_.socket_name;
  // A refused consumer batch size ends with what this front door's user does about it.
  if (config_.front_door) rc.batch_limit_advice = FrontDoorOf(*config_.front_door).larger_batch;
  rc.job = config_.job;
  rc.rank = config_.rank;
  rc.heartbeat_ms = o.heartbeat_ms;
  rc.handshake_timeout_ms = config_.handshake_timeout_ms;
  // Resume replays, the same for every front door: a feed that can make any position again
  // replays a passed position to the consumer resuming there (Admission::SettleResumers).
  // Where the feed or the distribution cannot, consumers are told why and what to do.
  rc.replays_resume = feed->replay() == Replay::kAny && dist->late_join();
  rc.resume_refusal = ResumeRefusal(*feed, *dist);
  // Joins are answered from the moment the ring listens: their views too.
  groups_ = std::make_unique<ViewGroups>(groups, view_source);
  rc.view_admitter = [g = groups_.get()](const std::string& spec, uint32_t in_use) {
    return g->Admit(spec, in_use);
  };
  auto ring = shm::RingLeader::Create(rc);
  if (!ring.ok()) return ring.status().WithContext(who);
  ring_ = std::move(ring).value();
  writer_ = std::make_unique<SlotWriter>(ring_.get(), slot, who, collector_);
  writer_->SetStages(std::move(stages));
  if (o.views_max > 1) writer_->SetViewGroups(groups_.get());
  AdmissionPolicy policy;
  policy.late_join_window = o.late_join_window;
  policy.ring_slots = rc.num_slots;
  policy.join_mid_epoch = o.join_mid_epoch;
  policy.replay = feed->replay() != Replay::kNone && dist->late_join();
  policy.replay_resume = rc.replays_resume;
  policy.producer_batch = plan_.producer_batch;
  // Catch-ups replay the current epoch (a resize schedule's feed can too).
  if ((feed->replay() == Replay::kAny || feed->replay() == Replay::kCurrentEpoch) &&
      dist->late_join())
    policy.catch_ups = o.late_join_catch_ups;
  admission_ = std::make_unique<Admission>(ring_.get(), policy);
  feed_ = std::move(feed);
  distribution_ = std::move(dist);
  feed_->Attach(writer_.get(), collector_);
  distribution_->Attach({ring_.get(), writer_.get(), admission_.get(), feed_.get(), who});
  InstallHandlers();
  BC_LOG(Info, Node, "{}: {} to {} consumers at {}: {} samples/epoch, producer batch {}, {} "
         "batches/epoch, consumer batches up to {}, {} slots of {} MiB, late join: {}", who,
         feed_->name(), distribution_->name(), display_address(), plan_.num_samples,
         plan_.producer_batch, batches_per_epoch(), plan_.max_consumer_batch, rc.num_slots,
         rc.slot_bytes >> 20,
         !policy.replay ? std::string("at the next epoch")
                        : fmt::format("replayed within {} batches{}",
                                      LateJoinWindow(o.late_join_window,
                                                     batches_per_epoch() > 0 ? batches_per_epoch()
                                                                             : -1,
                                                     rc.num_slots),
                                      rc.replays_resume ? ", resumes replayed" : "") +
             (policy.catch_ups > 0 ? fmt::format(", later joiners caught up ({} at once)",
                                                 policy.catch_ups)
                                   : std::string()));
  return Status::Ok();
}

Status Producer::PlanViews(Feed& feed, SlotLayout* slot, ViewGroupsConfig* groups,
                           BatchSource** source) {
  const Options& o = config_.options;
  std::string why;
  *source = feed.ViewSource(&why);
  if (*source != nullptr && !o.stage.empty()) {
    why = "its model stages (option 'stage') read the leader's view only";
    *source = nullptr;
  }
  if (o.views_max > 1 && *source == nullptr)
    return InvalidArgumentError("{}: option 'views_max' ({}) serves consumers' own views, but {}; "
                                "set views_max=1", config_.who, o.views_max, why);
  groups->who = config_.who;
  groups->views_max = o.views_max;
  groups->own_view_only = why;
  groups->capacity_samples = slot->capacity_samples;
  groups->epochs = config_.until_stopped ? 0 : static_cast<uint64_t>(std::max<int64_t>(0, o.epochs));
  if (o.views_max <= 1) return Status::Ok();
  // Reserved now: the ring's slot size is fixed when it is created. The ring prepares whole
  // slots, so the room costs memory in every slot used: views_max is 1 unless asked for.
  const uint64_t region = (slot->capacity_samples * plan_.sample.bytes() + 63) / 64 * 64;
  const uint64_t room = o.view_bytes > 0 ? static_cast<uint64_t>(o.view_bytes)
                                         : uint64_t(o.views_max - 1) * region;
  AddViewRoom(room, slot);
  groups->room_offset = slot->views_offset;
  groups->room_bytes = room;
  groups->room_option =
      o.view_bytes > 0 ? fmt::format("view_bytes={}", o.view_bytes)
                       : fmt::format("the {} bytes of view_bytes' default (views_max - 1 = {} "
                                     "groups of the leader's size)", room, o.views_max - 1);
  return Status::Ok();
}

// The ring's control thread: `batchcast status` and lost consumers.
void Producer::InstallHandlers() {
  ring_->SetStatusProvider([this](shm::StreamStatus* st) {
    st->epoch = epoch_.load();
    st->batch_in_epoch = batch_.load();
    st->batches_in_epoch = bpe_.load();
    st->producer_batches = produced_.load();
    st->replayed_batches = replayed_.load();
    st->idle = idle_.load();
    st->resume_replays = static_cast<uint32_t>(resume_replays_.load());
    st->resume_replayed_batches = resume_replayed_.load();
    if (groups_ != nullptr) groups_->FillStatus(st);
    st->catching_up = catching_up_.load();
    st->catch_up_deferred = deferred_.load();
    st->catch_ups = static_cast<uint32_t>(catch_ups_.load());
    st->catch_up_limit = static_cast<uint32_t>(std::max(0, admission_->policy().catch_ups));
    st->catch_up_deferrals = deferrals_.load();
  });
  ring_->SetLossHandler([this](const shm::MemberInfo& m, shm::LossKind kind) {
    if (kind == shm::LossKind::kDetached) {
      detached_.fetch_add(1);
      return;
    }
    lost_.fetch_add(1);
    if (collector_ != nullptr) collector_->Add(telemetry::Counter::kConsumersDetached, 1);
    if (config_.on_loss) config_.on_loss(shm::DescribeLoss(m, kind));
    if (config_.loss == LossPolicy::kFailStream)
      Abort(fmt::format("{} died or stopped responding ({}); failing the job", m.Describe(),
                        kind == shm::LossKind::kHeartbeat ? "no heartbeat"
                                                          : "its connection closed"));
  });
}

Producer::~Producer() {
  if (thread_.joinable()) {
    if (!done()) Abort(config_.who + ": destroyed before the end of the stream");
    thread_.join();
  }
  // A look-ahead fill or an exchange still writes into a slot: finish it before the ring goes.
  if (writer_ != nullptr) writer_->DrainLookahead();
  if (feed_ != nullptr) feed_->Drain().IgnoreError();
  if (ring_ != nullptr && !ended_ && !ring_->failed())
    ring_->Fail(config_.who + ": destroyed before the end of the stream");
  // An adopted hook (GPU staging) goes first: it unhooks itself from the writer and its
  // device ring unregisters the ring's host slots, so both must still exist.
  owned_hook_.reset();
  writer_.reset();
  ring_.reset();  // joins the control thread, whose handlers read this object
}

std::string Producer::display_address() const { return shm::DisplayAddress(config_.socket_name); }

int64_t Producer::batches_per_epoch() const {
  if (plan_.num_samples <= 0 || plan_.producer_batch <= 0) return 0;
  return (plan_.num_samples + plan_.producer_batch - 1) / plan_.producer_batch;
}

void Producer::AdoptSlotHook(std::unique_ptr<SlotHook> hook) {
  if (hook == nullptr) return;
  owned_hook_ = std::move(hook);
  writer_->SetHook(owned_hook_.get());
  OnStreamEnd([this] { return owned_hook_->Finish(); });
}

StagingTarget Producer::staging_target() {
  return {ring_.get(), config_.socket_name, [this](SlotHook* h) { writer_->SetHook(h); }};
}

std::vector<std::string> Producer::lost_consumers() const { return ring_->LostMembers(); }

ProducerStats Producer::stats() const {
  ProducerStats s;
  static_cast<WriterStats&>(s) = writer_->stats();
  static_cast<FeedStats&>(s) = feed_->stats();
  s.epochs_started = epochs_started_;
  s.replayed_batches = static_cast<int64_t>(replayed_.load());
  s.late_joins = admission_->late_joins();
  s.resume_replays = admission_->resume_replays();
  s.resume_replayed_batches = static_cast<int64_t>(resume_replayed_.load());
  s.catch_ups = admission_->catch_ups();
  s.catch_up_replayed_batches = static_cast<int64_t>(catch_up_replayed_.load());
  s.catch_up_deferrals = admission_->catch_up_deferrals();
  s.idle_waits = idle_waits_;
  s.consumers_detached = detached_.load();
  s.consumers_lost = lost_.load();
  return s;
}

std::string Producer::telemetry_summary() const {
  return telemetry_ != nullptr ? telemetry_->summary() : std::string();
}

// ------------------------------------------------------------------------------ lifecycle

void Producer::Stop(const std::string& why) {
  stopping_.store(true);
  stop_.store(true);
  ring_->Fail(config_.who + " stopped: " + why);
}

void Producer::Abort(const std::string& why) {
  abort_.Set(why);
  stop_.store(true);
  ring_->Fail(why);
}

Status Producer::StopStatus() const {
  if (abort_.set()) return abort_.Error(config_.who);
  if (stopping_.load()) return CancelledError("{}: stopped", config_.who);
  return Status::Ok();
}

Status Producer::WaitUntilEmpty(int64_t timeout_ms) {
  return producer::WaitUntilEmpty(*ring_, timeout_ms, config_.who);
}

Status Producer::Run() {
  Status st = RunStream();
  for (const auto& step : stream_end_) {  // GPU staging stops with the stream
    Status s = step();
    if (st.ok()) st = s;
  }
  // The job ends with its trainers: wait until the last has detached (a day at most).
  if (st.ok() && config_.wait_until_empty) st = WaitUntilEmpty(24LL * 3600 * 1000);
  if (telemetry_ != nullptr) {  // the stream is over: files and summary
    // A file that cannot be written is the run's error (a front door's exit status).
    Status written = telemetry_->Finish().WithContext(config_.who + " telemetry");
    if (st.ok()) st = written;
    else if (!written.ok()) BC_LOG(Error, Telem, "{}", written.ToString());
  }
  return st;
}

void Producer::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = true;
    done_ = false;
  }
  thread_ = std::thread([this] {
    NameThread("bc-leader");
    Status st = Run();
    std::lock_guard<std::mutex> lock(mu_);
    status_ = st;
    done_ = true;
    cv_.notify_all();
  });
}

bool Producer::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status Producer::Wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!running_) return FailedPreconditionError("{}: Wait() without Start()", config_.who);
  if (timeout_ms < 0) {
    cv_.wait(lock, [this] { return done_; });
  } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return done_; })) {
    return DeadlineExceededError("{}: the stream at {} is not complete after {} ms", config_.who,
                                 display_address(), timeout_ms);
  }
  return status_;
}

// ------------------------------------------------------------------------------ the stream

Status Producer::RunStream() {
  const Options& o = config_.options;
  const std::string& who = config_.who;
  auto fail = [this](const Status& st) {
    feed_->Drain().IgnoreError();
    if (abort_.set()) return abort_.Error(config_.who);
    if (stopping_.load()) {
      writer_->ReportSkips();
      return Status::Ok();  // Stop() failed the ring with its reason
    }
    ring_->Fail(st.message());
    ended_ = true;
    return st;
  };
  Status joined = WaitForExpected();
  if (joined.ok()) joined = StopStatus();
  if (Status st = distribution_->Start(joined); !st.ok()) return fail(st);
  writer_->RecordStart(feed_->threads());
  const auto start = static_cast<uint64_t>(o.start_epoch);
  for (uint64_t e = start; config_.until_stopped || e < static_cast<uint64_t>(o.epochs); ++e) {
    auto bpe = feed_->BeginEpoch(e);
    if (!bpe.ok()) return fail(bpe.status());
    epochs_started_ += 1;
    epoch_.store(e);
    bpe_.store(static_cast<uint64_t>(std::max<int64_t>(0, *bpe)));
    admission_->SetDeclaredPositions(*bpe >= 0 ? *bpe : feed_->DeclaredPositions());
    admission_->BeginEpoch(e, *bpe);
    if (feed_->replay() == Replay::kEpochStart)  // copies for late joiners' replays
      feed_->Retain(admission_->Window(*bpe));
    int64_t first = 0;
    if (e == start) {  // a resumed stream starts at the position holding the consumers'
      first = distribution_->FirstPosition(o, plan_.producer_batch);
      if (*bpe >= 0) first = std::min(first, *bpe);
      if (Status st = feed_->Seek({e, first, *bpe}); !st.ok()) return fail(st);
    }
    bool ended = false;
    Status st = RunEpoch(e, *bpe, first, &ended);
    if (!st.ok() || stop_.load()) return fail(st.ok() ? StopStatus() : st);
    if (ended) break;
  }
  if (Status st = feed_->Drain(); !st.ok()) return fail(st);
  if (!ended_) ring_->End();
  ended_ = true;
  writer_->ReportSkips();
  const ProducerStats s = stats();
  BC_LOG(Info, Node, "{}: stream complete: {} epochs, {} producer batches, {} samples, {} "
         "skipped, {} replayed to {} late joiner(s), {} to {} resuming consumer(s), {} to {} "
         "late joiner(s) caught up ({} deferred by late_join_catch_ups)", who,
         s.epochs_started, s.producer_batches, s.samples_produced, s.samples_skipped,
         s.replayed_batches, s.late_joins, s.resume_replayed_batches, s.resume_replays,
         s.catch_up_replayed_batches, s.catch_ups, s.catch_up_deferrals);
  if (s.view_samples > 0) {  // batches made for consumers' own views (view groups)
    const std::string views = fmt::format(
        "views: {} samples made for view groups with {} image decodes; one leader per "
        "view would have run {} ({:.1f}% saved)", s.view_samples, s.view_decodes,
        s.view_decodes_one_leader_per_view,
        s.view_decodes_one_leader_per_view > 0
            ? 100.0 * double(s.view_decodes_one_leader_per_view - s.view_decodes) /
                  double(s.view_decodes_one_leader_per_view)
            : 0.0);
    BC_LOG(Info, Node, "{}: {}", who, views);
    if (collector_ != nullptr) collector_->Annotate(views);
  }
  return Status::Ok();
}

// The expected consumers, in slices of 200 ms between which a stop and the front door's poll
// (a Python KeyboardInterrupt) are checked. join_timeout_ms < 0: no deadline.
Status Producer::WaitForExpected() {
  const int n = config_.expected_consumers;
  if (n <= 0) return Status::Ok();
  const int64_t t0 = shm::MonotonicNs();
  for (;;) {
    int64_t slice = 200;
    if (config_.join_timeout_ms >= 0)
      slice = std::clamp<int64_t>(config_.join_timeout_ms - (shm::MonotonicNs() - t0) / 1000000,
                                  0, slice);
    Status st = ring_->WaitForJoined(n, slice);
    if (st.code() != StatusCode::kDeadlineExceeded) return st;
    if (config_.poll) BC_RETURN_IF_ERROR(config_.poll());
    BC_RETURN_IF_ERROR(StopStatus());
    if (config_.join_timeout_ms >= 0 &&
        shm::MonotonicNs() - t0 >= config_.join_timeout_ms * 1000000)
      return DeadlineExceededError(
          "{}: only {} of {} consumers joined {} within {} ms (did a trainer fail to start, or "
          "attach to another address?)", config_.who, admission_->Attached(), n,
          display_address(), config_.join_timeout_ms);
  }
}

// What admission decided, for `batchcast status` (read on the control thread) and the
// telemetry: late joiners catching up or deferred by the limit.
void Producer::ShowAdmission() {
  catching_up_.store(admission_->CatchingUpMask());
  deferred_.store(admission_->DeferredMask());
  const auto started = static_cast<uint64_t>(admission_->catch_ups());
  const auto deferrals = static_cast<uint64_t>(admission_->catch_up_deferrals());
  if (collector_ != nullptr) {
    if (started > catch_ups_.load())
      collector_->Add(telemetry::Counter::kLateJoinCatchUps, int64_t(started - catch_ups_.load()));
    if (deferrals > deferrals_.load())
      collector_->Add(telemetry::Counter::kLateJoinsDeferred,
                      int64_t(deferrals - deferrals_.load()));
  }
  catch_ups_.store(started);
  deferrals_.store(deferrals);
}

void Producer::Idle(int64_t k) {
  idle_.store(1);
  idle_waits_ += 1;
  BC_LOG(Info, Node, "{}: nobody attached; decoding paused at epoch {} batch {}", config_.who,
         epoch_.load(), k);
  admission_->WaitForMembers(stop_);  // woken by a join (or a stop); no polling while idle
  idle_.store(0);
}

// One epoch of the stream through the one loop (epoch_loop.h): the distribution settles
// membership and says who receives each position; the feed makes it.
Status Producer::RunEpoch(uint64_t e, int64_t bpe, int64_t first, bool* ended) {
  EpochPolicy policy;
  policy.who = config_.who;
  policy.first = first;
  policy.wait = InterruptOnJoin(*admission_, &stop_);
  if (config_.poll) {
    auto joined = policy.wait.on_timeout;
    policy.wait.on_timeout = [this, joined]() -> Result<bool> {
      BC_RETURN_IF_ERROR(config_.poll());
      return joined();
    };
  }
  policy.settle = [this](int64_t k, int64_t n, int64_t f) {
    Result<Settled> settled = distribution_->Settle(k, n, f);
    ShowAdmission();
    return settled;
  };
  policy.produce = [this, e, bpe](int64_t k, uint64_t only, const AcquireWait& wait,
                                  int64_t next_k) -> Result<std::optional<uint64_t>> {
    BC_ASSIGN_OR_RETURN(std::optional<uint64_t> receivers,
                        distribution_->Produce({e, k, bpe}, only, wait, next_k));
    if (receivers) {
      produced_.fetch_add(1);
      if (only != admission_->SharedMask()) {  // a late joiner's replay
        replayed_.fetch_add(1);
        if (collector_ != nullptr) collector_->Add(telemetry::Counter::kBatchesReplayed, 1);
      }
    }
    return receivers;
  };
  policy.skip = [this, e, bpe](int64_t k) { return feed_->Skip({e, k, bpe}); };
  policy.idle = [this, e](int64_t k) {
    if (config_.end_when_empty) {
      BC_LOG(Info, Node, "{}: every consumer has left at epoch {} batch {}; ending", config_.who,
             e, k);
      ring_->End();
      ended_ = true;
      return true;
    }
    Idle(k);
    return false;
  };
  policy.check_stop = [this]() -> Status {
    Status st = config_.poll ? config_.poll() : Status::Ok();
    return distribution_->CheckStop(st.ok() ? StopStatus() : st);
  };
  if (admission_->policy().replay_resume || admission_->policy().catch_ups > 0)
    policy.replay = [this, bpe](uint64_t epoch, int64_t k, uint64_t only,
                                bool catch_up) -> Result<std::optional<uint64_t>> {
      resume_replays_.store(static_cast<uint64_t>(admission_->resume_replays()));
      BC_ASSIGN_OR_RETURN(std::optional<uint64_t> receivers,
                          feed_->Produce({epoch, k, bpe}, {}, only, AcquireWait{}, -1));
      if (receivers) {
        produced_.fetch_add(1);
        (catch_up ? catch_up_replayed_ : resume_replayed_).fetch_add(1);
        if (collector_ != nullptr) collector_->Add(telemetry::Counter::kBatchesReplayed, 1);
      }
      return receivers;
    };
  policy.at_position = [this](int64_t k) { batch_.store(static_cast<uint64_t>(k)); };
  policy.epoch_ended = [this] { return feed_->EpochEnded(); };
  policy.end_epoch = [this, e] { return distribution_->EndEpoch(e); };
  return RunEpochPositions(*admission_, e, bpe, policy, ended);
}

}  // namespace batchcast::producer
