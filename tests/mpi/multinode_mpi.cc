// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// mpi_multinode: both multi-node modes through batchcast::Runtime on virtual nodes
// (ranks_per_node) or real hosts, run by tests/mpi/run_multinode.sh. Every trainer checks
// what it receives against the stream definition computed here from (seed, epoch):
//   shard:     batch g of epoch e holds exactly this trainer's part of global batch g
//              (producer::ShardPartOf of StreamPlan(N, T*b).Batch(e, g)), in
//              order, then only reported fill repeats; over all trainers (MPI_Reduce of
//              the per-sample counts) every sample of every epoch arrives exactly once.
//   replicate: every sample of every epoch arrives at this trainer exactly once (plus the
//              reported repeats) and each batch's samples belong to producer batch k of
//              the single-node stream StreamPlan(N, P).
//              Every trainer also sums a signature of each producer batch's fresh ids; all
//              trainers must agree on it (every node published the same, possibly
//              compacted, batch).
// Both: each sample's pixels and label equal a reference decode done here (the pipeline is
// a pure function of (seed, epoch, sample), so a share decoded on another node and
// exchanged over MPI must match byte for byte). Trainer rank 0 prints PASS/FAIL.
// With option 'stage' (a module returning each image's per-channel mean as tensor "mean",
// tests/python/test_model_stage.py) every batch's "mean" must equal its images' means.
// Test-only knobs (environment, pass with mpirun -x):
//   MULTINODE_TEST_BAD_SAMPLE=i     sample i is corrupt and skipped: it must never arrive,
//                                   every other sample exactly once;
//   MULTINODE_TEST_STEP_US=u, MULTINODE_TEST_SLOW_RANK=r (10x slower steps) and
//   MULTINODE_TEST_MAX_LEAD=m       no trainer runs more than m producer batches ahead of
//                                   the slowest one on any node (shared window; virtual
//                                   nodes only) and no leader's RSS grows after batch 8;
//   MULTINODE_TEST_KILL_RANK=r, MULTINODE_TEST_KILL_AFTER=k  the trainer right after world
//                                   rank r SIGKILLs rank r after its k-th batch;
// Resume (--start_epoch/--start_batch): what lies before the trainers' position (epochs
// before start_epoch; in start_epoch the first start_batch x b samples of the epoch's order in
// replicate mode, the first start_batch global batches in shard mode) must never arrive, and
// everything after it exactly once, byte for byte as above.
//   MULTINODE_TEST_STOP_AFTER=k     every trainer leaves after k batches: the leaders must
//                                   agree to end and the job must finish cleanly (only the
//                                   batches received are checked).
//   MULTINODE_TEST_LEAVE_RANK=r, MULTINODE_TEST_LEAVE_EPOCH=e  (with 'resize') trainer rank r
//                                   leaves after its first batch of epoch e (>= 1): checked
//                                   up to there, the others to the end (CheckResized); with
//                                   MULTINODE_TEST_STEP_US / _SLOW_RANK, steps as above.
// With option 'resize' (replicate mode; CheckResized): every trainer gets exactly what a
// consumer of one node's leader running the same schedule gets: the checks of
// tests/unit/node/resize_checks.h (every sample of each epoch exactly once plus the reported
// repeats, at the size the schedule gives it, in batches of the scaled size with the LR
// factor, BatchesPerEpoch exact; each sample's pixels and label equal a reference decode at
// its scheduled size), and, per epoch, its fresh samples in the order of the schedule's
// producer batches (ResizeSchedule::ProducerBatches with the leader's producer batch and
// carve unit), so every node published the same batches at the same sizes.
#include <fmt/format.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "batchcast/runtime.h"
#include "data/dataset_reader.h"
#include "producer/distribution.h"
#include "producer/stream_plan.h"
#include "pipeline/pipeline.h"
#include "schedule/resize_schedule.h"
#include "schedule/resize_spec.h"
#include "tests/mpi/stage_mean.h"
#include "tests/unit/node/resize_checks.h"

namespace {

using batchcast::Batch;
using batchcast::Options;
using batchcast::Status;
using batchcast::StatusCode;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoll(v) : fallback;
}

int64_t RssKiB(int pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

// Each trainer's latest producer-batch position, in an MPI shared window (one host only).
class Positions {
 public:
  bool Create(MPI_Comm trainers) {
    MPI_Comm_size(trainers, &size_);
    int64_t* mine = nullptr;
    if (MPI_Win_allocate_shared(sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, trainers, &mine,
                                &win_) != MPI_SUCCESS)
      return false;
    MPI_Aint bytes = 0;
    int unit = 0;
    if (MPI_Win_shared_query(win_, 0, &bytes, &unit, &base_) != MPI_SUCCESS) return false;
    mine_ = mine;
    __atomic_store_n(mine_, -1, __ATOMIC_SEQ_CST);
    return MPI_Barrier(trainers) == MPI_SUCCESS;
  }
  void Publish(int64_t seq) {
    if (seq > __atomic_load_n(mine_, __ATOMIC_SEQ_CST)) __atomic_store_n(mine_, seq, __ATOMIC_SEQ_CST);
  }
  int64_t Slowest() const {
    int64_t lo = INT64_MAX;
    for (int i = 0; i < size_; ++i) lo = std::min(lo, __atomic_load_n(base_ + i, __ATOMIC_SEQ_CST));
    return lo;
  }
  void Free() {
    if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  }

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  int size_ = 0;
  int64_t* base_ = nullptr;
  int64_t* mine_ = nullptr;
};

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser: a signature term per sample id
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

class Checker {
 public:
  Checker(const Options& o, int trainer, int trainers, int64_t producer_batch)
      : o_(o), t_(trainer), T_(trainers), p_(producer_batch) {}

  Status Init() {
    auto reader = batchcast::data::DatasetReader::Open(o_.dataset);
    if (!reader.ok()) return reader.status();
    n_ = reader.value()->info().num_samples;
    if (o_.limit_samples > 0) n_ = std::min(n_, o_.limit_samples);
    Options ref = o_;
    ref.threads = 1;
    auto p = batchcast::pipeline::Pipeline::Create(ref, std::move(reader).value());
    if (!p.ok()) return p.status();
    reference_ = std::move(p).value();
    counts_.assign(size_t(o_.epochs) * size_t(n_), 0);
    plan_ = std::make_unique<batchcast::producer::StreamPlan>(n_, p_, o_.seed, o_.shuffle);
    signatures_.assign(size_t(o_.epochs) * size_t(plan_->BatchesPerEpoch()), 0);
    bad_ = EnvInt("MULTINODE_TEST_BAD_SAMPLE", -1);
    // Resume: the (epoch, sample) pairs before the trainers' position.
    before_.assign(counts_.size(), 0);
    const int64_t skipped = o_.start_batch * o_.batch_size * (o_.mode == "shard" ? T_ : 1);
    for (int e = 0; e <= std::min(o_.start_epoch, o_.epochs - 1); ++e) {
      const auto& order = plan_->EpochOrder(uint64_t(e));
      const int64_t upto = e < o_.start_epoch ? n_ : std::min(n_, skipped);
      for (int64_t i = 0; i < upto; ++i) before_[size_t(e) * size_t(n_) + size_t(order[size_t(i)])] = 1;
    }
    return Status::Ok();
  }
  // Whether (epoch, sample) entry i of counts() lies before the resume point.
  bool Before(size_t i) const { return before_[i] != 0; }

  void Check(const Batch& batch) {
    const auto& info = batch.info();
    const int64_t size = batch.size();
    const int64_t fresh = size - info.repeats;
    const int64_t* ids = batch.sample_ids();
    // Exact batches (docs/data-plane.md): b samples, the epoch's last one partial.
    const bool size_ok = size == o_.batch_size || (size < o_.batch_size && info.last_in_epoch);
    // A shard tail of fewer samples than trainers gives some trainers a repeat only.
    if (info.epoch >= uint64_t(o_.epochs) || !size_ok || (fresh <= 0 && o_.mode != "shard")) {
      Fail(fmt::format("batch {} of epoch {}: size {}, repeats {} (b={}, epochs={})", info.index,
                       info.epoch, size, info.repeats, o_.batch_size, o_.epochs));
      return;
    }
    std::span<const int64_t> pb = plan_->Batch(info.epoch, int64_t(info.producer_batch));
    if (o_.mode == "shard") {
      // The one shard planner (producer::ShardPartOf, shm::ShardTailPart's tail rule).
      const batchcast::producer::ShardPart part =
          batchcast::producer::ShardPartOf(pb, uint32_t(o_.batch_size), T_, t_);
      const int64_t count = static_cast<int64_t>(part.ids.size()) - part.repeats;
      if (count != fresh)
        Fail(fmt::format("epoch {} global batch {}: got {} fresh samples, my part has {}",
                         info.epoch, info.producer_batch, fresh, count));
      for (int64_t i = 0; i < std::min<int64_t>(size, int64_t(part.ids.size())); ++i)
        if (ids[i] != part.ids[size_t(i)])
          Fail(fmt::format("epoch {} global batch {} position {}: sample {}, expected {}",
                           info.epoch, info.producer_batch, i, ids[i], part.ids[size_t(i)]));
    } else {
      // A batch joined across two producer batches (skipped samples shift the carving)
      // starts in the one before.
      std::set<int64_t> members(pb.begin(), pb.end());
      if (info.producer_batch > 0) {
        std::span<const int64_t> prev = plan_->Batch(info.epoch, int64_t(info.producer_batch) - 1);
        members.insert(prev.begin(), prev.end());
      }
      for (int64_t i = 0; i < size; ++i)
        if (!members.count(ids[i]))
          Fail(fmt::format("epoch {} producer batch {}: sample {} is not in it", info.epoch,
                           info.producer_batch, ids[i]));
      for (int64_t i = 0; i < fresh; ++i)
        signatures_[size_t(info.epoch) * size_t(plan_->BatchesPerEpoch()) +
                    size_t(info.producer_batch)] += Mix(uint64_t(ids[i]));
    }
    for (int64_t i = 0; i < size; ++i)
      if (ids[i] == bad_) Fail(fmt::format("the skipped sample {} arrived", bad_));
    for (int64_t i = 0; i < size; ++i) {
      if (ids[i] < 0 || ids[i] >= n_) {
        Fail(fmt::format("sample id {} out of range", ids[i]));
        return;
      }
      const size_t at = size_t(info.epoch) * size_t(n_) + size_t(ids[i]);
      if (before_[at])
        Fail(fmt::format("epoch {} batch {}: sample {} lies before the resume point (epoch {} "
                         "batch {})", info.epoch, info.index, ids[i], o_.start_epoch,
                         o_.start_batch));
      counts_[at] += 1;
    }
    repeats_ += info.repeats;
    batches_ += 1;
    Verify(batch);
    if (!o_.stage.empty()) VerifyStageMean(batch);
  }

  // Counts this trainer saw, minus its reported repeats, must cover the expectation.
  void Finish(batchcast::Consumer& consumer) {
    if (!consumer.status().ok()) Fail("consumer ended with: " + consumer.status().message());
    if (consumer.stats().repeats != repeats_)
      Fail(fmt::format("stats() reports {} repeats, batches {}", consumer.stats().repeats,
                       repeats_));
    if (o_.mode == "shard") return;  // checked over all trainers in Report
    int64_t extra = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      if (counts_[i] == 0 && int64_t(i % size_t(n_)) != bad_ && !before_[i])
        Fail(fmt::format("epoch {}: sample {} never arrived", i / size_t(n_), i % size_t(n_)));
      extra += std::max(0, counts_[i] - 1);
    }
    if (extra != repeats_)
      Fail(fmt::format("{} samples arrived more than once, batches reported {} repeats", extra,
                       repeats_));
  }

  void Fail(const std::string& why) {
    if (error_.empty()) error_ = why;
  }
  const std::string& error() const { return error_; }
  std::vector<int>& counts() { return counts_; }
  std::vector<uint64_t>& signatures() { return signatures_; }
  int64_t repeats() const { return repeats_; }
  int64_t batches() const { return batches_; }
  int64_t checksummed() const { return checksummed_; }
  int epochs() const { return o_.epochs; }

 private:
  void Verify(const Batch& batch) {
    const auto& img = batch.images();
    const int64_t size = batch.size();
    const size_t sb = img.nbytes / size_t(size);
    ref_images_.resize(sb * size_t(size));
    ref_labels_.resize(size_t(size));
    batchcast::pipeline::BatchRequest req;
    req.epoch = batch.info().epoch;
    req.samples = std::span<const int64_t>(batch.sample_ids(), size_t(size));
    req.images = ref_images_.data();
    req.labels = ref_labels_.data();
    batchcast::pipeline::BatchResult res;
    Status st = reference_->RunBatch(req, &res);
    if (!st.ok()) return Fail("reference decode failed: " + st.message());
    const auto* px = static_cast<const uint8_t*>(img.data);
    const auto* labels = static_cast<const int64_t*>(batch.labels().data);
    for (int64_t i = 0; i < size; ++i) {
      const uint64_t got = Fnv1a(px + size_t(i) * sb, sb);
      const uint64_t want = Fnv1a(ref_images_.data() + size_t(i) * sb, sb);
      if (got != want)
        Fail(fmt::format("sample {} (epoch {}): pixel checksum {:016x}, reference {:016x}",
                         batch.sample_ids()[i], batch.info().epoch, got, want));
      if (labels[i] != ref_labels_[size_t(i)])
        Fail(fmt::format("sample {}: label {}, dataset says {}", batch.sample_ids()[i], labels[i],
                         ref_labels_[size_t(i)]));
      checksummed_ += 1;
    }
  }

  // With option 'stage' (tests/python/test_model_stage.py: a module returning each image's
  // per-channel mean as tensor "mean"): every batch's "mean" equals its uint8 images' means.
  void VerifyStageMean(const Batch& batch) {
    const std::string wrong = batchcast::testing::CheckChannelMeans(batch, "mean");
    if (!wrong.empty()) Fail(wrong);
  }

  Options o_;
  int t_, T_;
  int64_t p_;
  int64_t n_ = 0;
  std::unique_ptr<batchcast::pipeline::Pipeline> reference_;
  std::unique_ptr<batchcast::producer::StreamPlan> plan_;
  std::vector<int> counts_;
  std::vector<uint64_t> signatures_;  // replicate: per (epoch, producer batch)
  int64_t bad_ = -1;
  std::vector<uint8_t> ref_images_;
  std::vector<int64_t> ref_labels_;
  std::vector<char> before_;  // per (epoch, sample): before the resume point
  int64_t repeats_ = 0, batches_ = 0, checksummed_ = 0;
  std::string error_;
};

// Shard mode: summed over trainers, every (epoch, sample) exactly once beyond the repeats.
std::string CheckUnion(MPI_Comm trainers, Checker& c, int64_t* total_repeats) {
  int rank = 0;
  MPI_Comm_rank(trainers, &rank);
  std::vector<int> sum(rank == 0 ? c.counts().size() : 0);
  MPI_Reduce(c.counts().data(), sum.data(), static_cast<int>(c.counts().size()), MPI_INT, MPI_SUM,
             0, trainers);
  int64_t mine = c.repeats();
  MPI_Reduce(&mine, total_repeats, 1, MPI_INT64_T, MPI_SUM, 0, trainers);
  if (rank != 0) return "";
  int64_t extra = 0, missing = 0;
  const int64_t bad = EnvInt("MULTINODE_TEST_BAD_SAMPLE", -1);
  const size_t n = sum.size() / size_t(std::max(1, c.epochs()));
  for (size_t i = 0; i < sum.size(); ++i) {
    if (sum[i] == 0 && int64_t(i % n) != bad && !c.Before(i)) ++missing;
    extra += std::max(0, sum[i] - 1);
  }
  if (missing > 0) return fmt::format("{} (epoch, sample) pairs never arrived at any trainer", missing);
  if (extra != *total_repeats)
    return fmt::format("{} duplicate deliveries over all trainers, {} reported repeats", extra,
                       *total_repeats);
  return "";
}

// Progressive resizing across nodes (replicate mode): reads the stream to its end and holds it
// against the schedule rebuilt here from the same options (see the file comment). Returns the
// first failure ("" when every check passed); *checksummed counts the samples whose pixels
// were compared with the reference decode. A trainer told to leave
// (MULTINODE_TEST_LEAVE_RANK / _EPOCH) detaches after its first batch of that epoch; its whole
// epochs before are checked as above, that epoch's fresh samples as a prefix of the
// schedule's order, every sample it got byte for byte. *left_at: that epoch (-1: stayed).
std::string CheckResized(batchcast::Consumer& consumer, const Options& o, int world_rank,
                         int64_t* batches, int64_t* repeats, int64_t* checksummed,
                         int64_t* left_at) {
  auto reader = batchcast::data::DatasetReader::Open(o.dataset);
  if (!reader.ok()) return reader.status().message();
  int64_t n = reader.value()->info().num_samples;
  if (o.limit_samples > 0) n = std::min(n, o.limit_samples);
  Options ref_options = o;
  ref_options.threads = 1;
  auto ref = batchcast::pipeline::Pipeline::Create(ref_options, std::move(reader).value());
  if (!ref.ok()) return ref.status().message();
  batchcast::pipeline::Pipeline& reference = *ref.value();
  // The reference decode of sample `id` of `epoch` at `size` (pixels and label).
  std::vector<uint8_t> ref_image;
  int64_t ref_label = -1;
  auto decode = [&](uint64_t epoch, int64_t id, int size) {
    batchcast::pipeline::BatchRequest req;
    req.epoch = epoch;
    req.samples = std::span<const int64_t>(&id, 1);
    req.image_size = size;
    ref_image.assign(reference.OutputLayout(size).bytes(), 0);
    req.images = ref_image.data();
    req.labels = &ref_label;
    batchcast::pipeline::BatchResult res;
    return reference.RunBatch(req, &res);
  };
  // Labels do not depend on the epoch: judged as the batches arrive (pixels below, per epoch).
  std::map<int64_t, int64_t> labels;
  auto label_check = [&](int64_t id, int size, const uint8_t*, size_t, int64_t label,
                         bool* label_ok) {
    auto it = labels.find(id);
    if (it == labels.end()) {
      if (!decode(0, id, size).ok()) return false;
      it = labels.emplace(id, ref_label).first;
    }
    *label_ok = label == it->second;
    return true;
  };
  const int channels = static_cast<int>(reference.OutputLayout(0).channels);
  const int64_t step_us = EnvInt("MULTINODE_TEST_STEP_US", 0);
  const bool slow = world_rank == EnvInt("MULTINODE_TEST_SLOW_RANK", -1);
  const bool leaves = world_rank == EnvInt("MULTINODE_TEST_LEAVE_RANK", -1);
  const int64_t leave_epoch = leaves ? EnvInt("MULTINODE_TEST_LEAVE_EPOCH", 1) : -1;
  if (leave_epoch == 0 || leave_epoch >= o.epochs)
    return fmt::format("MULTINODE_TEST_LEAVE_EPOCH={}: give an epoch in [1, {}]", leave_epoch,
                       o.epochs - 1);
  *left_at = -1;
  auto after = [&](const batchcast::BatchInfo& info) {
    if (step_us > 0)  // the training step (not synchronisation): the slow rank's is 10x longer
      usleep(static_cast<useconds_t>(step_us * (slow ? 10 : 1)));
    if (leave_epoch < 0 || info.epoch != uint64_t(leave_epoch)) return true;
    *left_at = leave_epoch;
    return false;
  };
  batchcast::testing::ResizeSeen seen;
  batchcast::testing::ConsumeResized(&consumer, o.epochs, channels, label_check, &seen, after);
  // Gone at once (the checks below take a while; the node's other trainers go on).
  if (*left_at >= 0) consumer.Detach().IgnoreError();
  *batches = static_cast<int64_t>(seen.batches.size());
  *repeats = seen.stats.repeats;
  auto schedule = batchcast::testing::ExpectedSchedule(o, n);
  if (schedule == nullptr) return "the resize spec does not give a schedule";
  if (leave_epoch > 0 && *left_at < 0)
    return fmt::format("the stream ended before epoch {}, where this trainer was to leave",
                       leave_epoch);
  batchcast::testing::ResizeSeen whole = seen;  // the epochs it completed
  if (*left_at >= 0)
    std::erase_if(whole.batches, [&](const auto& b) { return int64_t(b.epoch) >= *left_at; });
  batchcast::testing::ExpectFollowsSchedule(whole, *schedule, o.batch_size,
                                            *left_at >= 0 ? int(*left_at) : o.epochs);
  const ::testing::TestResult& checks = ::testing::UnitTest::GetInstance()->ad_hoc_test_result();
  for (int i = 0; i < checks.total_part_count(); ++i)
    if (checks.GetTestPartResult(i).failed())
      return std::string("resize_checks.h: ") + checks.GetTestPartResult(i).message();
  // The order of one node's leader: the schedule's producer batches with the leader's
  // producer batch and carve unit (the largest consumer batch: every trainer's here).
  batchcast::schedule::ResizeScheduleParams params;
  params.spec = schedule->spec();
  params.seed = o.seed;
  params.num_samples = n;
  params.total_epochs = o.epochs;
  params.base_batch_size = o.producer_batch;
  params.carve_unit = o.batch_size;
  auto leader = batchcast::schedule::ResizeSchedule::Create(params);
  if (!leader.ok()) return leader.status().message();
  std::map<uint64_t, std::vector<std::pair<int64_t, int>>> fresh;  // (id, size) per epoch
  for (const auto& b : seen.batches)
    for (size_t i = 0; i + size_t(b.repeats) < b.ids.size(); ++i)
      fresh[b.epoch].emplace_back(b.ids[i], b.image_size);
  const int last = *left_at >= 0 ? int(*left_at) : o.epochs - 1;
  for (int e = 0; e <= last; ++e) {
    auto pbs = leader.value()->ProducerBatches(e, o.producer_batch);
    if (!pbs.ok()) return pbs.status().message();
    std::vector<std::pair<int64_t, int>> want;
    for (const auto& pb : *pbs)
      for (int64_t id : pb.samples) want.emplace_back(id, pb.image_size);
    const auto& got = fresh[uint64_t(e)];
    if (e == *left_at) {  // left after its first batch: that batch's fresh samples, in order
      if (got.empty() || got.size() >= want.size())
        return fmt::format("epoch {}: left after its first batch, but got {} of the epoch's {} "
                           "fresh samples", e, got.size(), want.size());
      want.resize(got.size());
    }
    if (got != want) {
      size_t i = 0;
      while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
      return fmt::format("epoch {}: fresh sample {} of {} is {} at {} px, but the schedule's "
                         "producer batches have {} at {} px there ({} samples)", e, i,
                         got.size(), i < got.size() ? got[i].first : -1,
                         i < got.size() ? got[i].second : 0, i < want.size() ? want[i].first : -1,
                         i < want.size() ? want[i].second : 0, want.size());
    }
  }
  // Every sample's pixels against the reference decode of its epoch at its scheduled size.
  for (const auto& b : seen.batches)
    for (size_t i = 0; i < b.ids.size(); ++i) {
      Status st = decode(b.epoch, b.ids[i], b.image_size);
      if (!st.ok()) return "reference decode failed: " + st.message();
      const uint64_t want = batchcast::testing::Fnv1a(ref_image.data(), ref_image.size());
      if (b.digests[i] != want)
        return fmt::format("epoch {}: sample {} at {} px: pixel checksum {:016x}, reference "
                           "{:016x}", b.epoch, b.ids[i], b.image_size, b.digests[i], want);
      *checksummed += 1;
    }
  return "";
}

// Trainer 0 prints every trainer's line, then `extra` (trainer 0's, may be empty) and the
// verdict: PASS when no trainer failed and extra_failed is false (trainer 0's). Collective.
bool Verdict(MPI_Comm trainers, const Options& o, const std::string& mine, bool failed,
             const std::string& extra, bool extra_failed) {
  int t = 0, T = 0;
  MPI_Comm_rank(trainers, &t);
  MPI_Comm_size(trainers, &T);
  char line[512] = {0};
  std::snprintf(line, sizeof(line), "%s", mine.c_str());
  std::vector<char> all(t == 0 ? sizeof(line) * size_t(T) : 0);
  MPI_Gather(line, sizeof(line), MPI_CHAR, all.data(), sizeof(line), MPI_CHAR, 0, trainers);
  int bad = failed ? 1 : 0, bad_total = 0;
  MPI_Allreduce(&bad, &bad_total, 1, MPI_INT, MPI_SUM, trainers);
  int extra_bad = extra_failed ? 1 : 0;
  MPI_Bcast(&extra_bad, 1, MPI_INT, 0, trainers);
  const bool ok = bad_total == 0 && extra_bad == 0;
  if (t == 0) {
    for (int r = 0; r < T; ++r) std::printf("%s\n", &all[size_t(r) * sizeof(line)]);
    if (!extra.empty()) std::printf("%s\n", extra.c_str());
    std::printf("%s mpi_multinode mode=%s%s: %d trainers, %d failed\n", ok ? "PASS" : "FAIL",
                o.mode.c_str(), o.resize.empty() ? "" : " resize", T, bad_total + extra_bad);
    std::fflush(stdout);
  }
  return ok;
}

int RunJob(int argc, char** argv) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::vector<std::string> words(argv + 1, argv + argc), rest;
  auto resolved = batchcast::ResolveOptions(words, &rest);
  if (!resolved.ok() || !rest.empty()) {
    std::fprintf(stderr, "mpi_multinode: rank %d: %s\n", world_rank,
                 resolved.ok() ? ("unknown argument " + rest[0]).c_str()
                               : resolved.status().message().c_str());
    return 2;
  }
  Options o = resolved.value();
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::vector<int> pids(size_t(world_size), 0);  // to kill a rank, or read a leader's RSS
  int my_pid = static_cast<int>(getpid());
  MPI_Allgather(&my_pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  auto rt = batchcast::Runtime::Create(o);
  if (!rt.ok()) {
    std::fprintf(stderr, "mpi_multinode: rank %d: runtime create failed: %s\n", world_rank,
                 rt.status().message().c_str());
    return 1;
  }
  batchcast::Runtime& runtime = *rt.value();
  if (!runtime.is_trainer()) {
    Status st = runtime.Serve();
    Status fin = runtime.Finalize();
    return st.ok() && fin.ok() ? 0 : 1;
  }
  MPI_Comm trainers = runtime.trainer_comm();
  int t = 0, T = 0;
  MPI_Comm_rank(trainers, &t);
  MPI_Comm_size(trainers, &T);
  if (!o.resize.empty()) {  // a progressive-resizing schedule (replicate mode)
    int64_t batches = 0, repeats = 0, checksummed = 0, left_at = -1;
    const std::string error = CheckResized(runtime.consumer(), o, world_rank, &batches, &repeats,
                                           &checksummed, &left_at);
    runtime.consumer().Detach().IgnoreError();
    const std::string left =
        left_at >= 0 ? fmt::format("left in epoch {} ", left_at) : std::string();
    const std::string line = fmt::format(
        "  rank {} (trainer {}, node {}): batches={} repeats={} checksummed={} {}{}{}",
        world_rank, t, runtime.node_id(), batches, repeats, checksummed, left,
        error.empty() ? "ok" : "FAIL: ", error);
    const bool ok = Verdict(trainers, o, line, !error.empty(), "", false);
    Status fin = runtime.Finalize();
    return ok && fin.ok() ? 0 : 1;
  }
  const int64_t p = o.mode == "shard" ? int64_t(T) * o.batch_size
                                      : (o.producer_batch > 0 ? o.producer_batch : 2 * o.batch_size);
  Checker checker(o, t, T, p);
  Status init = checker.Init();
  if (!init.ok()) {
    std::fprintf(stderr, "mpi_multinode: rank %d: %s\n", world_rank, init.message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int64_t step_us = EnvInt("MULTINODE_TEST_STEP_US", 0);
  const int64_t slow_rank = EnvInt("MULTINODE_TEST_SLOW_RANK", -1);
  const int64_t max_lead = EnvInt("MULTINODE_TEST_MAX_LEAD", -1);
  const int64_t kill_rank = EnvInt("MULTINODE_TEST_KILL_RANK", -1);
  const int64_t kill_after = EnvInt("MULTINODE_TEST_KILL_AFTER", 3);
  const int64_t stop_after = EnvInt("MULTINODE_TEST_STOP_AFTER", -1);
  // This node's leader (local rank 0; virtual nodes are consecutive world ranks), whose RSS
  // the lead check also watches.
  const int leader_rank = o.ranks_per_node > 0 ? world_rank - runtime.local_rank() : -1;
  Positions positions;
  if (max_lead >= 0 && !positions.Create(trainers)) {
    std::fprintf(stderr, "mpi_multinode: rank %d: shared window failed\n", world_rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int64_t lead = 0, rss_warm = -1, rss_max = -1;
  batchcast::Consumer& consumer = runtime.consumer();
  Batch batch;
  for (int64_t got = 0;; ++got) {
    if (got == stop_after) break;
    Status st = consumer.Next(&batch);
    if (st.code() == StatusCode::kEndOfStream) break;
    if (!st.ok()) {
      std::fprintf(stderr, "mpi_multinode: rank %d: next batch failed: %s\n", world_rank,
                   st.message().c_str());
      std::fflush(stderr);
      std::_Exit(3);
    }
    if (kill_rank >= 0 && world_rank == kill_rank + 1 && got == kill_after) {
      std::printf("mpi_multinode: rank %d kills rank %lld (pid %d) after %lld batches\n",
                  world_rank, (long long)kill_rank, pids[size_t(kill_rank)], (long long)got);
      std::fflush(stdout);
      kill(pids[size_t(kill_rank)], SIGKILL);
    }
    if (max_lead >= 0) {
      const auto seq = static_cast<int64_t>(batch.info().producer_seq);
      positions.Publish(seq);  // before this trainer can release anything of seq
      lead = std::max(lead, seq - positions.Slowest());
      if (lead > max_lead)
        checker.Fail(fmt::format("ran {} producer batches ahead of the slowest trainer (bound {})",
                                 lead, max_lead));
      if (leader_rank >= 0) {
        const int64_t rss = RssKiB(pids[size_t(leader_rank)]);
        if (got == 8) rss_warm = rss;
        if (got > 8) rss_max = std::max(rss_max, rss);
      }
    }
    // Resumed: the node leader starts at the position, so the first batch is from one of the
    // first producer batches it publishes (shard: one part per local trainer), never after
    // decoding the stream from its start.
    if (got == 0 && (o.start_epoch > 0 || o.start_batch > 0) &&
        batch.info().producer_seq >= uint64_t(o.mode == "shard" ? T : 1))
      checker.Fail(fmt::format("resumed at epoch {} batch {}, but the first batch came from ring "
                               "position {}: the leader did not start at the resume point",
                               o.start_epoch, o.start_batch, batch.info().producer_seq));
    checker.Check(batch);
    if (step_us > 0)  // the training step (not synchronisation): slow_rank's is 10x longer
      usleep(static_cast<useconds_t>(step_us * (world_rank == slow_rank ? 10 : 1)));
  }
  batch.Release();
  if (stop_after < 0) checker.Finish(consumer);
  if (rss_warm > 0 && rss_max > rss_warm + 16 * 1024)
    checker.Fail(fmt::format("leader rank {} RSS grew from {} KiB (batch 8) to {} KiB",
                             leader_rank, rss_warm, rss_max));
  if (max_lead >= 0) {
    positions.Publish(INT64_MAX);  // finished: never the slowest any more
    MPI_Barrier(trainers);
    positions.Free();
  }
  if (o.mode != "shard" && stop_after < 0) {  // every node published the same batches
    std::vector<uint64_t>& sig = checker.signatures();
    std::vector<uint64_t> lo(sig.size()), hi(sig.size());
    MPI_Allreduce(sig.data(), lo.data(), static_cast<int>(sig.size()), MPI_UINT64_T, MPI_MIN,
                  trainers);
    MPI_Allreduce(sig.data(), hi.data(), static_cast<int>(sig.size()), MPI_UINT64_T, MPI_MAX,
                  trainers);
    for (size_t i = 0; i < sig.size(); ++i)
      if (lo[i] != hi[i]) {
        checker.Fail(fmt::format("trainers disagree on the samples of producer batch {} of epoch "
                                 "{}: the nodes published different batches", i % (sig.size() /
                                 size_t(o.epochs)), i / (sig.size() / size_t(o.epochs))));
        break;
      }
  }
  consumer.Detach().IgnoreError();
  int64_t total_repeats = 0;
  std::string union_error =
      o.mode == "shard" && stop_after < 0 ? CheckUnion(trainers, checker, &total_repeats) : "";
  const std::string line = fmt::format(
      "  rank {} (trainer {}, node {}): batches={} repeats={} checksummed={} lead={} "
      "leader_rss_kib={}..{} {}{}", world_rank, t, runtime.node_id(), checker.batches(),
      checker.repeats(), checker.checksummed(), lead, rss_warm, rss_max,
      checker.error().empty() ? "ok" : "FAIL: ", checker.error());
  const std::string union_line =
      o.mode != "shard" ? ""
                        : fmt::format("  union over {} trainers: {} ({} reported repeats)", T,
                                      union_error.empty() ? "every sample exactly once"
                                                          : union_error, total_repeats);
  const bool ok = Verdict(trainers, o, line, !checker.error().empty(), union_line,
                          !union_error.empty());
  Status fin = runtime.Finalize();
  return ok && fin.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // MULTINODE_TEST_THREAD_LEVEL=single provokes the thread-level check of replicate mode.
  const char* level = std::getenv("MULTINODE_TEST_THREAD_LEVEL");
  const bool single = level != nullptr && std::string(level) == "single";
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, single ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE,
                      &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "mpi_multinode: MPI_Init_thread failed\n");
    return 1;
  }
  int rc = RunJob(argc, argv);
  MPI_Finalize();
  return rc;
}
