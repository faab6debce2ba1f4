// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Views through the Producer (docs/pipeline.md "Views through the Producer"): consumers of
// one leader declare their own views (Options::view); the leader decodes each sample once
// and fills every group's region of the slot. Checked end to end over real JPEGs and PNGs,
// real rings and real consumers:
//   - each group's pixels, per (epoch, sample), are those of a one-view leader of that view
//     (seeded with core::ViewDrawSeed), and a view with draw=leader gets that leader's whole
//     stream, batch for batch;
//   - every consumer in every group gets every sample exactly once per epoch, also one that
//     joins late with a view no one else has;
//   - a consumer's stream is the same whether or not other groups are attached;
//   - a view the leader cannot serve is refused at Attach with a message naming the cause;
//   - views with their own schedules of sizes by epoch (view(resize=...)): each group's
//     pixels per (epoch, sample) are a one-view leader's at that epoch's size, the size
//     changes at epoch boundaries in what consumers see (BatchInfo, the images' shape,
//     `batchcast status`), with joins at an epoch boundary mid-schedule and early leaves.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "batchcast/consumer.h"
#include "core/random.h"
#include "core/view.h"
#include "producer/batch_source.h"
#include "producer/producer.h"
#include "schedule/view_schedule.h"
#include "telemetry/collector.h"
#include "transport/shm/control.h"
#include "tests/unit/producer/photo_dataset.h"

namespace batchcast::node {
namespace {

// What one consumer received, in order: (epoch, sample id, checksum of label and pixels).
using Stream = std::vector<std::tuple<uint64_t, int64_t, uint64_t>>;
// Per (epoch, sample id): the checksum.
using Digest = std::map<std::pair<uint64_t, int64_t>, uint64_t>;

Digest DigestOf(const Stream& s) {
  Digest d;
  for (const auto& [epoch, id, h] : s) d[{epoch, id}] = h;
  return d;
}

// Every sample of every epoch it received exactly once (num_samples per epoch).
void ExpectExactlyOnce(const Stream& s, int64_t num_samples, const std::string& who) {
  std::map<uint64_t, std::map<int64_t, int>> seen;
  for (const auto& [epoch, id, h] : s) seen[epoch][id] += 1;
  for (const auto& [epoch, ids] : seen) {
    EXPECT_EQ(int64_t(ids.size()), num_samples) << who << " epoch " << epoch;
    for (const auto& [id, n] : ids) EXPECT_EQ(n, 1) << who << " epoch " << epoch << " id " << id;
  }
}

// Per epoch: the image sizes a consumer saw (BatchInfo::image_size and the images' height).
struct EpochSeen {
  std::set<std::pair<int64_t, int64_t>> sizes;  // (BatchInfo::image_size, the images' height)
  std::set<float> lr;                           // BatchInfo::lr_factor
  int64_t batches = 0;                          // delivered
  int64_t foreseen = -1;                        // Consumer::BatchesPerEpoch at its first batch
  std::map<uint64_t, std::map<int64_t, uint64_t>> fresh;  // producer seq -> id -> checksum
  std::vector<std::tuple<uint64_t, int64_t, uint64_t>> repeats;  // (producer seq, id, checksum)
};
using Sizes = std::map<uint64_t, EpochSeen>;

// Reads `c` to its end; after `stop_after` batches (>= 0) it leaves (Detach).
// Adds the batch's fresh samples to `s` (and its sizes to `sizes`, if not null).
void RecordBatch(const Batch& batch, Stream* s, Sizes* sizes) {
  if (sizes != nullptr) {  // chw: [n, c, h, w]
    EpochSeen& seen = (*sizes)[batch.info().epoch];
    seen.sizes.insert({batch.info().image_size, batch.images().shape[2]});
    seen.lr.insert(batch.info().lr_factor);
    seen.batches += 1;
  }
  const size_t sb = batch.images().nbytes / static_cast<size_t>(batch.size());
  const auto* px = static_cast<const uint8_t*>(batch.images().data);
  const auto* labels = static_cast<const int64_t*>(batch.labels().data);
  const int64_t fresh = batch.size() - int64_t(batch.info().repeats);
  for (int64_t i = 0; i < batch.size(); ++i) {
    uint64_t h = HashCombine(Mix64(uint64_t(labels[i])), sb);
    for (size_t k = 0; k < sb; ++k) h = HashCombine(h, px[i * sb + k]);
    const int64_t id = batch.sample_ids()[i];
    if (i < fresh) s->emplace_back(batch.info().epoch, id, h);
    if (sizes == nullptr) continue;
    EpochSeen& seen = (*sizes)[batch.info().epoch];
    if (i < fresh) seen.fresh[batch.info().producer_seq][id] = h;
    else seen.repeats.emplace_back(batch.info().producer_seq, id, h);
  }
}

void DrainSized(Consumer* c, Stream* s, Status* status, int stop_after, Sizes* sizes) {
  Batch batch;
  for (int n = 0;; ++n) {
    if (n == stop_after) {
      *status = c->Detach();
      return;
    }
    Status st = c->Next(&batch);
    if (!st.ok()) {
      if (st.code() != StatusCode::kEndOfStream) *status = st;
      return;
    }
    if (sizes != nullptr && (*sizes)[batch.info().epoch].foreseen < 0)
      (*sizes)[batch.info().epoch].foreseen = c->BatchesPerEpoch(batch.info().epoch);
    RecordBatch(batch, s, sizes);
  }
}

void Drain(Consumer* c, Stream* s, Status* status, int stop_after = -1) {
  DrainSized(c, s, status, stop_after, nullptr);
}

struct Leader {
  std::unique_ptr<producer::Producer> producer;
  std::thread thread;
  Status status;
  ~Leader() {
    if (thread.joinable()) thread.join();
  }
};

// expected 0: a leader that waits for consumers until stopped.
std::unique_ptr<Leader> StartLeader(const Options& o, int expected,
                                    telemetry::Collector* collector = nullptr) {
  static std::atomic<int> n{0};
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = expected;
  cfg.max_consumer_batch = static_cast<uint32_t>(std::min<int64_t>(16, o.producer_batch));
  cfg.socket_name = "batchcast-test-" + std::to_string(getpid()) + "-views-" + std::to_string(n++);
  cfg.job = "test";
  cfg.join_timeout_ms = 60000;
  cfg.end_when_empty = expected > 0;
  cfg.collector = collector;
  auto source = producer::MakePipelineSource(o);
  EXPECT_TRUE(source.ok()) << source.status().ToString();
  if (!source.ok()) return nullptr;
  auto p = producer::Producer::Create(cfg, std::move(source).value());
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return nullptr;
  auto l = std::make_unique<Leader>();
  l->producer = std::move(p).value();
  Leader* raw = l.get();
  l->thread = std::thread([raw] { raw->status = raw->producer->Run(); });
  return l;
}

// Joins the consumers' threads, then the leader's: the leader and every consumer ended well.
void JoinAll(Leader* leader, std::initializer_list<std::thread*> threads,
             std::initializer_list<const Status*> statuses) {
  for (std::thread* t : threads) t->join();
  leader->thread.join();
  EXPECT_TRUE(leader->status.ok()) << leader->status.ToString();
  for (const Status* s : statuses) EXPECT_TRUE(s->ok()) << s->ToString();
}

struct Want {
  std::string view;     // "" = the leader's
  int batch_size = 8;
  int stop_after = -1;  // leaves after this many batches (-1: reads to the end)
};

// One leader, the consumers in `wants` attached before it starts; their streams (and with
// `sizes`, the sizes each saw per epoch).
std::vector<Stream> RunLeader(const Options& o, const std::vector<Want>& wants,
                              std::vector<Sizes>* sizes = nullptr) {
  auto leader = StartLeader(o, static_cast<int>(wants.size()));
  if (leader == nullptr) return {};
  std::vector<std::unique_ptr<Consumer>> cs;
  for (size_t i = 0; i < wants.size(); ++i) {
    Options co = o;
    co.batch_size = wants[i].batch_size;
    co.view = wants[i].view;
    auto c = Consumer::Attach(leader->producer->address(), co, static_cast<int>(i));
    EXPECT_TRUE(c.ok()) << wants[i].view << ": " << c.status().ToString();
    if (!c.ok()) {
      leader->producer->Abort("a consumer could not attach");
      return {};
    }
    cs.push_back(std::move(c).value());
  }
  std::vector<Stream> streams(cs.size());
  std::vector<Status> statuses(cs.size());
  std::vector<std::thread> threads;
  if (sizes != nullptr) sizes->assign(cs.size(), Sizes());
  for (size_t i = 0; i < cs.size(); ++i)
    threads.emplace_back(DrainSized, cs[i].get(), &streams[i], &statuses[i],
                         wants[i].stop_after, sizes != nullptr ? &(*sizes)[i] : nullptr);
  for (auto& t : threads) t.join();
  leader->thread.join();
  EXPECT_TRUE(leader->status.ok()) << leader->status.ToString();
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  return streams;
}

Options ReferenceFor(const Options& o, const std::string& spec, uint64_t epoch = 0);

// Every fill repeat a consumer got (per-producer-batch carving) is a copy of a sample of its
// own producer batch, label and pixels: the leader wrote a tail long enough for it. Returns
// the repeats checked.
int64_t ExpectRepeatsOfTheirProducerBatch(const Sizes& sizes, const std::string& who) {
  int64_t n = 0;
  for (const auto& [epoch, seen] : sizes)
    for (const auto& [seq, id, h] : seen.repeats) {
      auto batch = seen.fresh.find(seq);
      const bool found = batch != seen.fresh.end() && batch->second.count(id) != 0;
      EXPECT_TRUE(found) << who << ": epoch " << epoch << ": a repeat of sample " << id
                         << " that producer batch " << seq << " did not give it";
      if (found) {
        EXPECT_EQ(batch->second.at(id), h) << who << ": repeat of " << id;
      }
      n += 1;
    }
  return n;
}

// Each consumer i of `got` (names[i]) got `epochs` whole epochs of `num_samples` samples:
// every sample once per epoch, and the batches Consumer::BatchesPerEpoch foresaw.
void ExpectWholeEpochs(const std::vector<Stream>& got, const std::vector<Sizes>& seen,
                       const std::vector<std::string>& names, int64_t num_samples,
                       size_t epochs) {
  ASSERT_EQ(got.size(), names.size());
  ASSERT_EQ(seen.size(), names.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ExpectExactlyOnce(got[i], num_samples, names[i]);
    EXPECT_EQ(got[i].size(), epochs * size_t(num_samples)) << names[i];
    ASSERT_EQ(seen[i].size(), epochs) << names[i];
    for (const auto& [epoch, z] : seen[i])
      EXPECT_EQ(z.batches, z.foreseen) << names[i] << " epoch " << epoch;
  }
}

// Each epoch of `got` (a consumer of view `spec` on the leader of `o`) against a one-view
// leader at that epoch's size: the same pixels per (epoch, sample), and only that size seen.
void ExpectScheduledView(const Options& o, const std::string& spec, const Stream& got,
                         const Sizes& sizes, int batch_size, const std::string& who) {
  auto own = producer::ViewSpecBase(o);
  ASSERT_TRUE(own.ok());
  auto v = schedule::ParseScheduledView(spec, *own);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_FALSE(v->schedule.empty()) << spec;
  std::map<int, std::set<uint64_t>> epochs_at;  // size -> the epochs got has at that size
  for (const auto& [epoch, id, h] : got) epochs_at[v->schedule.SizeAt(epoch)].insert(epoch);
  for (const auto& [epoch, seen] : sizes) {
    const int want = v->schedule.SizeAt(epoch);
    EXPECT_EQ(seen.sizes, (std::set<std::pair<int64_t, int64_t>>{{want, want}}))
        << who << ": epoch " << epoch << " should be all at " << want;
  }
  for (const auto& [size, epochs] : epochs_at) {
    const auto ref = RunLeader(ReferenceFor(o, spec, *epochs.begin()), {{"", batch_size}});
    ASSERT_EQ(ref.size(), 1u);
    const Digest want = DigestOf(ref[0]);
    int compared = 0;
    for (const auto& [epoch, id, h] : got) {
      if (epochs.count(epoch) == 0) continue;
      auto it = want.find({epoch, id});
      ASSERT_NE(it, want.end()) << who << ": epoch " << epoch << " sample " << id;
      EXPECT_EQ(it->second, h) << who << ": epoch " << epoch << " sample " << id << " at " << size;
      compared += 1;
    }
    EXPECT_GT(compared, 0);
  }
}

// The options of a one-view leader that makes what `spec` makes on the leader of `o` in
// epoch `epoch` (a scheduled view: at that epoch's size, with the draws of the view).
Options ReferenceFor(const Options& o, const std::string& spec, uint64_t epoch) {
  auto own = producer::ViewSpecBase(o);
  EXPECT_TRUE(own.ok());
  auto scheduled = schedule::ParseScheduledView(spec, *own);
  EXPECT_TRUE(scheduled.ok()) << scheduled.status().ToString();
  if (!scheduled.ok()) return o;
  const core::View* v = &scheduled->view;
  Options r = o;
  r.views_max = 1;
  r.image_size = scheduled->At(epoch).image_size;
  r.crop = core::ViewCropName(v->crop);
  if (v->crop == core::ViewCrop::kRandom) {
    r.crop_scale_min = v->crop_scale_min;
    r.crop_scale_max = v->crop_scale_max;
  }
  r.flip = v->flip;
  r.normalize = v->normalize;
  r.dtype = v->dtype == core::ViewDType::kFloat32 ? "float32" : "uint8";
  r.layout = v->layout == core::ViewLayout::kHWC ? "hwc" : "chw";
  r.seed = core::ViewDrawSeed(o.seed, *v);
  return r;
}

// A leader of `o` with consumer a (view `va`, o's batch size) and consumer c (view `vc`,
// batch 4, leaving after `c_batches`) attached before it starts; once a holds the first batch
// of epoch 1, consumer b (view `vb`, batch `bb`) joins; all read to the end.
struct ViewsLateJoinRun {
  Stream sa, sb, sc;
  Sizes za, zb;
};
ViewsLateJoinRun RunViewsLateJoin(const Options& o, const std::string& va, const std::string& vc,
                        int c_batches, const std::string& vb, int bb) {
  ViewsLateJoinRun r;
  auto leader = StartLeader(o, 2);
  if (leader == nullptr) return r;
  const std::string& at = leader->producer->address();
  Options oa = o, oc = o, ob = o;
  oa.view = va;
  oc.view = vc;
  oc.batch_size = 4;
  ob.view = vb;
  ob.batch_size = bb;
  ob.epochs = kEpochsUntilStreamEnds;
  auto a = Consumer::Attach(at, oa, 0);
  auto c = Consumer::Attach(at, oc, 2);
  if (!a.ok() || !c.ok()) {
    ADD_FAILURE() << a.status().ToString() << " / " << c.status().ToString();
    leader->producer->Abort("a consumer could not attach");
    return r;
  }
  Status st_a, st_b, st_c;
  std::thread tc(Drain, c->get(), &r.sc, &st_c, c_batches);
  Batch batch;
  do {
    Status st = (*a)->Next(&batch);
    if (!st.ok()) {
      ADD_FAILURE() << st.ToString();
      break;
    }
    RecordBatch(batch, &r.sa, &r.za);
  } while (batch.info().epoch == 0);
  auto b = Consumer::Attach(at, ob, 1);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  batch = Batch();
  std::thread tb;
  if (b.ok()) tb = std::thread(DrainSized, b->get(), &r.sb, &st_b, -1, &r.zb);
  std::thread ta(DrainSized, a->get(), &r.sa, &st_a, -1, &r.za);
  if (!tb.joinable()) tb = std::thread([] {});
  JoinAll(leader.get(), {&ta, &tb, &tc}, {&st_a, &st_b, &st_c});
  return r;
}

class ViewGroupsLeaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("view_groups_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "photos.h5").string();
    Status st = testing::WritePhotoDataset(path_, kSamples);
    ASSERT_TRUE(st.ok()) << st.ToString();
    o_.dataset = path_;
    o_.epochs = 2;
    o_.seed = 11;
    o_.threads = 2;
    o_.producer_batch = 16;
    o_.batch_size = 8;
    o_.image_size = 40;
    o_.crop = "random";
    o_.flip = true;
    o_.crop_decode = true;
    o_.views_max = 4;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Why a leader of `leader_options` refuses a consumer of view `spec` ("" if it does not).
  std::string refused(const Options& leader_options, const std::string& spec) {
    auto leader = StartLeader(leader_options, 0);
    if (leader == nullptr) return "no leader";
    Options co = o_;
    co.view = spec;
    auto c = Consumer::Attach(leader->producer->address(), co, 0);
    leader->producer->Stop("test over");
    if (c.ok()) return "";
    return c.status().message();
  }

  static constexpr int kSamples = 45;
  std::filesystem::path dir_;
  std::string path_;
  Options o_;
};

TEST_F(ViewGroupsLeaderTest, EachGroupHasTheBytesOfAOneViewLeaderExactlyOncePerEpoch) {
  const std::string small = "view(size=24)";
  const std::string centred = "view(size=32,crop=center,flip=0,normalize=1)";
  const auto got = RunLeader(o_, {{""}, {small, 8}, {small, 5}, {centred, 16}});
  ASSERT_EQ(got.size(), 4u);
  const char* names[] = {"leader's view", "size 24 (b=8)", "size 24 (b=5)", "centred"};
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].size(), size_t(2 * kSamples)) << names[i];
    ExpectExactlyOnce(got[i], kSamples, names[i]);
  }
  // Each group against a leader of its view alone (its own draws: ViewDrawSeed).
  const auto own = RunLeader(o_, {{""}});
  const auto ref_small = RunLeader(ReferenceFor(o_, small), {{""}});
  const auto ref_centred = RunLeader(ReferenceFor(o_, centred), {{"", 16}});
  ASSERT_EQ(own.size(), 1u);
  ASSERT_EQ(ref_small.size(), 1u);
  ASSERT_EQ(ref_centred.size(), 1u);
  EXPECT_EQ(got[0], own[0]) << "the leader's view changed when other groups were attached";
  EXPECT_TRUE(DigestOf(got[1]) == DigestOf(ref_small[0]));
  EXPECT_TRUE(DigestOf(got[2]) == DigestOf(ref_small[0]));
  EXPECT_TRUE(DigestOf(got[3]) == DigestOf(ref_centred[0]));
  EXPECT_FALSE(DigestOf(got[1]) == DigestOf(got[3]));  // the check can fail
}

// `batchcast status` and the leader's telemetry per view group: the status reply names each
// member's group and each group's view, key and region; the telemetry has, per view, its
// members, samples and transform time, and the decodes against one leader per view.
TEST_F(ViewGroupsLeaderTest, StatusAndTelemetryShowEachViewGroup) {
  telemetry::Tags tags;
  tags.role = telemetry::Role::kLeader;
  auto collector = telemetry::Collector::Create(tags);
  ASSERT_TRUE(collector.ok()) << collector.status().ToString();
  auto leader = StartLeader(o_, 3, collector->get());
  ASSERT_NE(leader, nullptr);
  const std::string small = "view(size=24)";
  const std::vector<Want> wants = {{""}, {small, 8}, {small, 5}};
  std::vector<std::unique_ptr<Consumer>> cs;
  std::vector<Batch> first(wants.size());
  for (size_t i = 0; i < wants.size(); ++i) {
    Options co = o_;
    co.batch_size = wants[i].batch_size;
    co.view = wants[i].view;
    auto c = Consumer::Attach(leader->producer->address(), co, static_cast<int>(i));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cs.push_back(std::move(c).value());
  }
  for (size_t i = 0; i < cs.size(); ++i) ASSERT_TRUE(cs[i]->Next(&first[i]).ok());
  // Every consumer holds a batch: all three are members now.
  auto r = shm::QueryStatus(leader->producer->address(), 10000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->count, 3u);
  for (uint32_t k = 0; k < r->count; ++k)
    EXPECT_EQ(r->members[k].group, r->members[k].rank == 0 ? 0u : 1u) << "rank " << r->members[k].rank;
  EXPECT_EQ(r->stream.views_max, 4u);
  ASSERT_EQ(r->stream.view_groups, 2u);
  const shm::GroupStatus& own = r->stream.groups[0];
  const shm::GroupStatus& g1 = r->stream.groups[1];
  EXPECT_EQ(own.group, 0u);
  EXPECT_NE(std::string(own.view).find("size=40"), std::string::npos) << own.view;
  EXPECT_EQ(g1.group, 1u);
  EXPECT_NE(std::string(g1.view).find("size=24"), std::string::npos) << g1.view;
  EXPECT_GT(g1.slot_bytes, 0u);
  EXPECT_EQ(r->stream.view_room_used_bytes, g1.slot_bytes);
  EXPECT_GE(r->stream.view_room_bytes, g1.slot_bytes);
  const uint64_t own_key = own.view_key, small_key = g1.view_key;
  // To the end.
  for (auto& b : first) b.Release();
  std::vector<Stream> streams(cs.size());
  std::vector<Status> statuses(cs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cs.size(); ++i)
    threads.emplace_back(Drain, cs[i].get(), &streams[i], &statuses[i], -1);
  for (auto& t : threads) t.join();
  leader->thread.join();
  ASSERT_TRUE(leader->status.ok()) << leader->status.ToString();
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  telemetry::RankData d = (*collector)->Snapshot();
  auto last = [&d](const std::string& name) -> double {
    for (const auto& n : d.named)
      if (n.name == name && !n.value.empty()) return n.value.back();
    ADD_FAILURE() << "no named series " << name;
    return -1;
  };
  auto series = [](uint64_t key, const char* what) {
    return fmt::format("views/{:016x}/{}", key, what);
  };
  // Every batch was made for both groups (all three attached before the first), 2 epochs.
  EXPECT_EQ(last(series(own_key, "members")), 1);
  EXPECT_EQ(last(series(small_key, "members")), 2);
  EXPECT_EQ(last(series(own_key, "samples")), 2 * kSamples);
  EXPECT_EQ(last(series(small_key, "samples")), 2 * kSamples);
  EXPECT_GT(last(series(own_key, "transform_ns")), 0);
  EXPECT_GT(last(series(small_key, "transform_ns")), 0);
  // One leader per view decodes every sample once per view; here a sample is decoded once
  // per distinct DCT scale its groups need: at least once, at most once per group.
  const double decodes = last("views/decodes");
  EXPECT_EQ(last("views/decodes_one_leader_per_view"), 2 * 2 * kSamples);
  EXPECT_GE(decodes, 2 * kSamples);
  EXPECT_LE(decodes, 2 * 2 * kSamples);
  const producer::ProducerStats ps = leader->producer->stats();
  EXPECT_EQ(ps.view_decodes, int64_t(decodes));
  EXPECT_EQ(ps.view_decodes_one_leader_per_view, 2 * 2 * kSamples);
  EXPECT_NE(d.annotations.find(fmt::format("view {:016x}: view(size=24", small_key)),
            std::string::npos) << d.annotations;
  EXPECT_NE(d.annotations.find("views: 90 samples made for view groups with"),
            std::string::npos) << d.annotations;
}

TEST_F(ViewGroupsLeaderTest, AViewWithTheLeadersDrawGetsAOneViewLeadersStreamBatchForBatch) {
  const std::string spec = "view(size=24,draw=leader)";
  const auto got = RunLeader(o_, {{""}, {spec}});
  Options ref = o_;
  ref.image_size = 24;
  ref.views_max = 1;
  const auto want = RunLeader(ref, {{""}});
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_EQ(got[1], want[0]);
}

TEST_F(ViewGroupsLeaderTest, AConsumersStreamDoesNotDependOnTheOtherGroups) {
  const std::string spec = "view(size=32,flip=0)";
  const auto with =
      RunLeader(o_, {{"view(size=24)"}, {spec, 5}, {"view(size=16,crop=center)", 16}});
  const auto alone = RunLeader(o_, {{spec, 5}});
  ASSERT_EQ(with.size(), 3u);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(with[1], alone[0]);
}

TEST_F(ViewGroupsLeaderTest, GroupsComeAndGoAndEveryoneStillGetsEachSampleOncePerEpoch) {
  o_.epochs = 3;
  o_.views_max = 3;
  auto leader = StartLeader(o_, 1);
  ASSERT_NE(leader, nullptr);
  const std::string& at = leader->producer->address();
  Options first = o_;
  first.view = "view(size=24)";
  auto a = Consumer::Attach(at, first, 0);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Stream sa, sb, sc;
  Status st_a, st_b, st_c;
  // a takes a batch, then b joins with a view nobody has (a late join or the next
  // epoch's start), c joins with the leader's view and leaves after three batches.
  Batch batch;
  ASSERT_TRUE((*a)->Next(&batch).ok());
  Options second = o_;
  second.view = "view(size=32,crop=center)";
  second.epochs = kEpochsUntilStreamEnds;
  auto b = Consumer::Attach(at, second, 1);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Options third = o_;
  third.epochs = kEpochsUntilStreamEnds;
  auto c = Consumer::Attach(at, third, 2);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  batch = Batch();
  std::thread tb(Drain, b->get(), &sb, &st_b, -1);
  std::thread tc(Drain, c->get(), &sc, &st_c, 3);
  std::thread ta(Drain, a->get(), &sa, &st_a, -1);
  JoinAll(leader.get(), {&ta, &tb, &tc}, {&st_a, &st_b, &st_c});
  // a: 3 whole epochs less the first batch it took above; b: whole epochs only.
  ExpectExactlyOnce(sb, kSamples, "late joiner with a new view");
  EXPECT_GE(sb.size(), size_t(kSamples));
  const auto ref = RunLeader(ReferenceFor(o_, second.view), {{""}});
  ASSERT_EQ(ref.size(), 1u);
  Digest want = DigestOf(ref[0]);
  for (const auto& [key, h] : DigestOf(sb))  // the reference ran 3 epochs too
    EXPECT_EQ(want[key], h) << "epoch " << key.first << " sample " << key.second;
  EXPECT_EQ(sa.size(), size_t(3 * kSamples - 8));
}

// A joiner after the late-join window with join_mid_epoch starts at once: the position it
// starts at may have been filled ahead (look-ahead) for the receivers before it, without its
// group; that fill must be dropped and the position made again with the joiner's group.
TEST_F(ViewGroupsLeaderTest, AJoinerMidEpochGetsItsGroupFromItsFirstBatch) {
  o_.epochs = 3;
  o_.views_max = 2;
  o_.join_mid_epoch = true;
  o_.producer_batch = 4;
  o_.batch_size = 4;  // 12 producer batches an epoch; the late-join window is the ring's 4
  auto leader = StartLeader(o_, 1);
  ASSERT_NE(leader, nullptr);
  auto a = Consumer::Attach(leader->producer->address(), o_, 0);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Batch batch;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE((*a)->Next(&batch).ok());
  batch = Batch();
  Options late = o_;
  late.view = "view(size=24)";
  late.epochs = kEpochsUntilStreamEnds;
  auto b = Consumer::Attach(leader->producer->address(), late, 1);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Stream sa, sb;
  Status st_a, st_b;
  std::thread ta(Drain, a->get(), &sa, &st_a, -1);
  std::thread tb(Drain, b->get(), &sb, &st_b, -1);
  ta.join();
  tb.join();
  leader->thread.join();
  EXPECT_TRUE(leader->status.ok()) << leader->status.ToString();
  EXPECT_TRUE(st_a.ok()) << st_a.ToString();
  EXPECT_TRUE(st_b.ok()) << st_b.ToString();
  ASSERT_FALSE(sb.empty());
  EXPECT_EQ(std::get<0>(sb.front()), 0u);  // at once, in epoch 0 after the window
  Stream whole;  // the epochs after its first: every sample once
  for (const auto& x : sb)
    if (std::get<0>(x) > 0) whole.push_back(x);
  EXPECT_EQ(whole.size(), size_t(2 * kSamples));
  ExpectExactlyOnce(whole, kSamples, "joiner mid-epoch");
  EXPECT_EQ(sa.size(), size_t(3 * kSamples - 6 * 4));
  const auto ref = RunLeader(ReferenceFor(o_, late.view), {{"", 4}});
  ASSERT_EQ(ref.size(), 1u);
  Digest want = DigestOf(ref[0]);
  for (const auto& [key, h] : DigestOf(sb))
    EXPECT_EQ(want[key], h) << "epoch " << key.first << " sample " << key.second;
}

TEST_F(ViewGroupsLeaderTest, ViewsTheLeaderCannotServeAreRefusedAtAttach) {
  Options one = o_;
  one.views_max = 1;
  EXPECT_NE(refused(one, "view(size=24)").find("views_max=1"), std::string::npos);
  EXPECT_EQ(refused(one, "view(draw=leader)"), "");  // the leader's own view
  EXPECT_NE(refused(o_, "view(szie=24)").find("unknown key 'szie'"), std::string::npos);
  EXPECT_NE(refused(o_, "view(size=24,mean=1:2)").find("mean"), std::string::npos);
  Options tight = o_;
  tight.view_bytes = 4096;
  const std::string room = refused(tight, "view(size=24)");
  EXPECT_NE(room.find("start the leader with view_bytes="), std::string::npos) << room;
  Options two = o_;
  two.views_max = 2;
  auto leader = StartLeader(two, 0);
  ASSERT_NE(leader, nullptr);
  Options co = o_;
  co.view = "view(size=24)";
  auto held = Consumer::Attach(leader->producer->address(), co, 0);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  co.view = "view(size=32)";
  auto over = Consumer::Attach(leader->producer->address(), co, 1);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("over views_max=2"), std::string::npos)
      << over.status().message();
  co.view = "view(size=24)";  // the same view joins its group
  auto same = Consumer::Attach(leader->producer->address(), co, 2);
  EXPECT_TRUE(same.ok()) << same.status().ToString();
  leader->producer->Stop("test over");
}

// Views with schedules of their own (docs/progressive-resizing.md "A schedule per view").
// Two groups on different schedules (one growing, one shrinking and centred) beside the
// leader's view: per (epoch, sample) each group's bytes are those of a one-view leader at that
// epoch's size with the view's draws, every consumer gets each sample once per epoch, and
// each epoch's batches are all at the schedule's size (BatchInfo::image_size, the shape).
TEST_F(ViewGroupsLeaderTest, GroupsOnDifferentSchedulesShareOneDecodeAndMatchOneViewLeaders) {
  o_.epochs = 4;
  const std::string grow = "view(resize=16@0:24@1:32@3)";
  const std::string shrink = "view(resize=32:16@2,crop=center,flip=0)";
  std::vector<Sizes> sizes;
  const auto got = RunLeader(o_, {{""}, {grow, 8}, {grow, 5}, {shrink, 16}}, &sizes);
  ASSERT_EQ(got.size(), 4u);
  const char* names[] = {"leader's view", "grow (b=8)", "grow (b=5)", "shrink"};
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].size(), size_t(4 * kSamples)) << names[i];
    ExpectExactlyOnce(got[i], kSamples, names[i]);
    EXPECT_EQ(sizes[i].size(), 4u) << names[i];
  }
  EXPECT_EQ(sizes[0][3].sizes, (std::set<std::pair<int64_t, int64_t>>{{40, 40}}));
  ExpectScheduledView(o_, grow, got[1], sizes[1], 8, names[1]);
  ExpectScheduledView(o_, grow, got[2], sizes[2], 5, names[2]);
  ExpectScheduledView(o_, shrink, got[3], sizes[3], 16, names[3]);
  EXPECT_TRUE(DigestOf(got[1]) == DigestOf(got[2]));  // one group
  // The leader's view is what it is without the scheduled groups.
  const auto own = RunLeader(o_, {{""}});
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(got[0], own[0]);
  // A scheduled view's stream does not depend on the other groups either.
  const auto alone = RunLeader(o_, {{shrink, 16}});
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(got[3], alone[0]);
}

// A group on its own schedule joins once the stream is past epoch 0 (mid-schedule: admitted
// at an epoch boundary, or within the late-join window with the epoch's start replayed), and
// follows the stream's epochs: each epoch it gets is at the schedule's size for that stream
// epoch. A consumer of the first scheduled group leaves after three batches; the others
// still get every sample once per epoch, and `batchcast status` shows each group's size of
// the epoch being made.
TEST_F(ViewGroupsLeaderTest, AScheduledGroupJoinsMidScheduleAndAnotherConsumerLeavesEarly) {
  o_.epochs = 4;
  o_.views_max = 3;
  const std::string first = "view(resize=16@0:32@2)";
  const std::string late = "view(resize=24@0:16@2:32@3,flip=0)";
  const ViewsLateJoinRun r = RunViewsLateJoin(o_, first, first, 3, late, 6);
  EXPECT_EQ(r.sc.size(), size_t(3 * 4));  // three batches of 4, then it left
  ExpectExactlyOnce(r.sa, kSamples, "first scheduled group");
  EXPECT_EQ(r.sa.size(), size_t(4 * kSamples));
  ExpectScheduledView(o_, first, r.sa, r.za, 8, "first scheduled group");
  // b: only whole epochs from a stream epoch >= 1, at its schedule's size for that epoch.
  ASSERT_FALSE(r.sb.empty());
  EXPECT_GE(std::get<0>(r.sb.front()), 1u) << "b joined once the stream was in epoch 1";
  ExpectExactlyOnce(r.sb, kSamples, "late scheduled group");
  EXPECT_EQ(r.zb.rbegin()->first, 3u);
  ExpectScheduledView(o_, late, r.sb, r.zb, 6, "late scheduled group");
}

TEST_F(ViewGroupsLeaderTest, StatusAndTelemetryShowAScheduledGroupsSizeNow) {
  o_.epochs = 3;
  telemetry::Tags tags;
  tags.role = telemetry::Role::kLeader;
  auto collector = telemetry::Collector::Create(tags);
  ASSERT_TRUE(collector.ok()) << collector.status().ToString();
  auto leader = StartLeader(o_, 1, collector->get());
  ASSERT_NE(leader, nullptr);
  Options co = o_;
  co.view = "view(resize=16@0:24@2)";
  auto c = Consumer::Attach(leader->producer->address(), co, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Held: the last batch of the run; the leader has made everything, the last epoch last.
  Batch batch;
  while (true) {
    ASSERT_TRUE((*c)->Next(&batch).ok());
    if (batch.info().epoch == 2 && batch.info().last_in_epoch) break;
  }
  EXPECT_EQ(batch.info().image_size, 24);
  auto r = shm::QueryStatus(leader->producer->address(), 10000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->stream.view_groups, 2u);
  const shm::GroupStatus& g1 = r->stream.groups[1];
  EXPECT_EQ(std::string(g1.view).rfind("view(resize=16@0:24@2,", 0), 0u) << g1.view;
  EXPECT_EQ(g1.image_size, 24u);
  EXPECT_EQ(r->stream.groups[0].image_size, 0u);
  const uint64_t key = g1.view_key;
  batch = Batch();
  Stream s;
  Status st;
  Drain(c->get(), &s, &st);
  leader->thread.join();
  ASSERT_TRUE(leader->status.ok()) << leader->status.ToString();
  telemetry::RankData d = (*collector)->Snapshot();
  std::vector<double> sizes;
  for (const auto& n : d.named)
    if (n.name == fmt::format("views/{:016x}/image_size", key)) sizes = n.value;
  ASSERT_FALSE(sizes.empty());
  EXPECT_EQ(sizes.front(), 16);
  EXPECT_EQ(sizes.back(), 24);
  EXPECT_NE(d.annotations.find(fmt::format("view {:016x}: view(resize=16@0:24@2,", key)),
            std::string::npos) << d.annotations;
}

// What a scheduled view cannot be, refused at Attach (or at the leader's start) by message.
TEST_F(ViewGroupsLeaderTest, ScheduledViewsTheLeaderCannotServeAreRefusedWithCauseAndFix) {
  // The room holds the largest scheduled size.
  Options tight = o_;
  tight.view_bytes = 16 * 24 * 24 * 3 * 2;  // a few 24-px images per slot: not 32 px
  const std::string room = refused(tight, "view(resize=16@0:32@1)");
  EXPECT_NE(room.find("view view(resize=16@0:32@1,"), std::string::npos) << room;
  EXPECT_NE(room.find("3x32x32 uint8 chw, its largest scheduled size"), std::string::npos) << room;
  EXPECT_NE(room.find("start the leader with view_bytes="), std::string::npos) << room;
  // A step the run never reaches.
  const std::string late = refused(o_, "view(resize=16@0:24@2)");
  EXPECT_NE(late.find("its size 24 from epoch 2 is never made: the leader runs 2 epochs"),
            std::string::npos) << late;
  // A leader's resize(...) spec as a view's: it would change the shared batches' sizes.
  const std::string spec = refused(o_, "view(resize=resize(min=16,max=32))");
  EXPECT_NE(spec.find("not a leader's resize(...) schedule"), std::string::npos) << spec;
  EXPECT_NE(spec.find("scales batch sizes"), std::string::npos) << spec;
}

// A leader on its own progressive-resizing schedule (option 'resize') serves other views: its
// group 0 follows its plan (scaled batches, LR factors, its sizes per batch) exactly as
// without them, and each other group gets its own size per epoch (fixed, or its own schedule)
// in the same producer batches at its consumers' own batch sizes, LR factor 1, every sample
// once per epoch, BatchesPerEpoch exact, pixels those of a one-view leader without a
// schedule at that size.
TEST_F(ViewGroupsLeaderTest, ALeaderOnItsOwnResizeScheduleServesOtherViewsAtTheirSizes) {
  o_.epochs = 3;
  o_.resize = "resize(sizes=16:24:40,upgrade=0.5)";
  const std::string fixed = "view(size=24)";
  const std::string grow = "view(resize=16@0:32@2)";
  std::vector<Sizes> seen;
  const auto got = RunLeader(o_, {{"", 8}, {fixed, 5}, {grow, 6}}, &seen);
  ASSERT_EQ(got.size(), 3u);
  const std::vector<std::string> names = {"leader's group", "fixed 24", "grow"};
  ExpectWholeEpochs(got, seen, names, kSamples, 3);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_GT(ExpectRepeatsOfTheirProducerBatch(seen[i], names[i]), 0) << names[i];
  // The leader's group: its schedule's sizes and scaled LR factors (epoch 0 all at 16).
  EXPECT_EQ(seen[0][0].sizes, (std::set<std::pair<int64_t, int64_t>>{{16, 16}}));
  EXPECT_GT(*seen[0][0].lr.begin(), 1.0f);
  // The other groups: their own size per epoch, batches of their own size, LR factor 1.
  for (size_t i = 1; i < got.size(); ++i)
    for (const auto& [epoch, z] : seen[i])
      EXPECT_EQ(z.lr, std::set<float>{1.0f}) << names[i] << " epoch " << epoch;
  Options plain = o_;  // the references: one-view leaders without a schedule
  plain.resize = "";
  const auto ref = RunLeader(ReferenceFor(plain, fixed), {{"", 5}});
  ASSERT_EQ(ref.size(), 1u);
  EXPECT_TRUE(DigestOf(got[1]) == DigestOf(ref[0]));
  for (const auto& [epoch, z] : seen[1])
    EXPECT_EQ(z.sizes, (std::set<std::pair<int64_t, int64_t>>{{24, 24}})) << epoch;
  ExpectScheduledView(plain, grow, got[2], seen[2], 6, names[2]);
  // Group 0 is what the leader makes without other groups, batch for batch.
  const auto alone = RunLeader(o_, {{"", 8}});
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(got[0], alone[0]);
}

// The fill tail of a producer batch covers each group at its own carving (TailForReceivers):
// under the leader's schedule its own consumers carve at scaled batch sizes, another group's
// at their own. Epoch 0 is one producer batch of all 45 samples at size 16; the leader's
// consumers' batch of 8 scales to 15 (max_batch=15), which divides 45: no tail. The other
// group's batch of 7 does not: its last batch holds 4 repeats, which the tail must hold (a
// tail sized by 7 scaled like the leader's, 15 too, would be empty, and that batch would
// read 4 positions the leader never wrote).
TEST_F(ViewGroupsLeaderTest, AGroupsFillTailFollowsItsOwnBatchSizeBesideTheLeadersSchedule) {
  o_.epochs = 3;
  o_.resize = "resize(sizes=16:24:40,upgrade=0.5,max_batch=15)";
  const std::string fixed = "view(size=24)";
  std::vector<Sizes> seen;
  const auto got = RunLeader(o_, {{"", 8}, {fixed, 7}}, &seen);
  ASSERT_EQ(got.size(), 2u);
  const std::vector<std::string> names = {"leader's group", "group of 7"};
  ExpectWholeEpochs(got, seen, names, kSamples, 3);
  // Epoch 0: one producer batch; the leader's consumers got 3 batches of 15, no repeats; the
  // group's consumer 7 batches of 7, the last with 4 repeats of that producer batch's samples.
  EXPECT_EQ(seen[0][0].sizes, (std::set<std::pair<int64_t, int64_t>>{{16, 16}}));
  EXPECT_EQ(seen[0][0].fresh.size(), 1u);
  EXPECT_EQ(seen[0][0].batches, 3);
  EXPECT_TRUE(seen[0][0].repeats.empty());
  EXPECT_EQ(seen[1][0].batches, 7);
  EXPECT_EQ(seen[1][0].repeats.size(), 4u);
  ExpectRepeatsOfTheirProducerBatch(seen[0], names[0]);
  EXPECT_GE(ExpectRepeatsOfTheirProducerBatch(seen[1], names[1]), 4);
  // The group's pixels per (epoch, sample): a one-view leader's without a schedule.
  Options plain = o_;
  plain.resize = "";
  const auto ref = RunLeader(ReferenceFor(plain, fixed), {{"", 7}});
  ASSERT_EQ(ref.size(), 1u);
  EXPECT_TRUE(DigestOf(got[1]) == DigestOf(ref[0]));
}

// Beside the leader's own schedule, a view group joins once the stream is in epoch 1 and a
// consumer of another group leaves after two batches: the joiner gets whole stream epochs at
// its own schedule's size (LR 1, BatchesPerEpoch exact, repeats from their own producer
// batch), the leader's consumer still gets every sample once per epoch.
TEST_F(ViewGroupsLeaderTest, BesideTheLeadersScheduleAGroupJoinsLateAndAnotherLeavesEarly) {
  o_.epochs = 3;
  o_.resize = "resize(sizes=16:24:40,upgrade=0.5)";
  const std::string late = "view(resize=24@0:16@2,flip=0)";
  const ViewsLateJoinRun r = RunViewsLateJoin(o_, "", "view(size=24,crop=center)", 2, late, 7);
  EXPECT_EQ(r.sc.size(), size_t(2 * 4));
  ExpectExactlyOnce(r.sa, kSamples, "leader's group");
  EXPECT_EQ(r.sa.size(), size_t(3 * kSamples));
  ASSERT_FALSE(r.sb.empty());
  EXPECT_GE(std::get<0>(r.sb.front()), 1u);
  ExpectExactlyOnce(r.sb, kSamples, "late group");
  for (const auto& [epoch, z] : r.zb) {
    EXPECT_EQ(z.batches, z.foreseen) << "epoch " << epoch;
    EXPECT_EQ(z.lr, std::set<float>{1.0f}) << "epoch " << epoch;
  }
  ExpectRepeatsOfTheirProducerBatch(r.zb, "late group");
  Options plain = o_;
  plain.resize = "";
  ExpectScheduledView(plain, late, r.sb, r.zb, 7, "late group");
}

}  // namespace
}  // namespace batchcast::node
