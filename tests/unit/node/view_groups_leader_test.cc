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
//   - a view the leader cannot serve is refused at Attach with a message naming the cause.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>
#include <tuple>

#include "batchcast/consumer.h"
#include "core/random.h"
#include "core/view.h"
#include "producer/batch_source.h"
#include "producer/producer.h"
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

// Reads `c` to its end; after `stop_after` batches (>= 0) it leaves (Detach).
void Drain(Consumer* c, Stream* s, Status* status, int stop_after = -1) {
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
    const size_t sb = batch.images().nbytes / static_cast<size_t>(batch.size());
    const auto* px = static_cast<const uint8_t*>(batch.images().data);
    const auto* labels = static_cast<const int64_t*>(batch.labels().data);
    for (int64_t i = 0; i < batch.size() - int64_t(batch.info().repeats); ++i) {
      uint64_t h = HashCombine(Mix64(uint64_t(labels[i])), sb);
      for (size_t k = 0; k < sb; ++k) h = HashCombine(h, px[i * sb + k]);
      s->emplace_back(batch.info().epoch, batch.sample_ids()[i], h);
    }
  }
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

struct Want {
  std::string view;     // "" = the leader's
  int batch_size = 8;
  int stop_after = -1;  // leaves after this many batches (-1: reads to the end)
};

// One leader, the consumers in `wants` attached before it starts; their streams.
std::vector<Stream> RunLeader(const Options& o, const std::vector<Want>& wants) {
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
  for (size_t i = 0; i < cs.size(); ++i)
    threads.emplace_back(Drain, cs[i].get(), &streams[i], &statuses[i], wants[i].stop_after);
  for (auto& t : threads) t.join();
  leader->thread.join();
  EXPECT_TRUE(leader->status.ok()) << leader->status.ToString();
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  return streams;
}

// The options of a one-view leader that makes what `spec` makes on the leader of `o`.
Options ReferenceFor(const Options& o, const std::string& spec) {
  auto own = producer::ViewSpecBase(o);
  EXPECT_TRUE(own.ok());
  auto v = core::ParseView(spec, *own);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  Options r = o;
  r.views_max = 1;
  r.image_size = v->image_size;
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
  ta.join();
  tb.join();
  tc.join();
  leader->thread.join();
  EXPECT_TRUE(leader->status.ok()) << leader->status.ToString();
  EXPECT_TRUE(st_a.ok() && st_b.ok() && st_c.ok())
      << st_a.ToString() << " / " << st_b.ToString() << " / " << st_c.ToString();
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
  auto refused = [&](const Options& leader_options, const std::string& spec) -> std::string {
    auto leader = StartLeader(leader_options, 0);
    if (leader == nullptr) return "no leader";
    Options co = o_;
    co.view = spec;
    auto c = Consumer::Attach(leader->producer->address(), co, 0);
    leader->producer->Stop("test over");
    if (c.ok()) return "";
    return c.status().message();
  };
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

}  // namespace
}  // namespace batchcast::node
