// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// producer::ViewGroups: which group a joiner's view gets, the refusals (views_max, the slots'
// view room, a bad spec, a producer that makes one view), groups freed when their last
// member is gone and their room given to the next view, and the regions a position is
// filled for (docs/pipeline.md "Views through the Producer").
#include "producer/view_groups.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport/shm/control.h"

namespace batchcast::producer {
namespace {

// The views a pipeline of 3-channel images would give, without a dataset.
class ViewSource : public BatchSource {
 public:
  ViewSource() {
    own_.image_size = 64;
    own_.crop = core::ViewCrop::kRandom;
    own_.flip = true;
    own_.draw = core::kLeaderDraw;
  }
  int64_t num_samples() const override { return 10; }
  pipeline::SampleLayout MaxLayout() const override { return Layout(64); }
  pipeline::SampleLayout Layout(int size) const override {
    return pipeline::SampleLayout{3, size, size, pipeline::DType::kUint8, pipeline::Layout::kCHW};
  }
  Status Fill(const pipeline::BatchRequest&, pipeline::BatchResult*) override {
    return Status::Ok();
  }
  const core::View* own_view() const override { return &own_; }
  Result<pipeline::SampleLayout> CheckView(const core::View& v) const override {
    if (v.image_size > 200) return InvalidArgumentError("size {} is too large here", v.image_size);
    pipeline::SampleLayout l = Layout(v.image_size);
    if (v.normalize || v.dtype == core::ViewDType::kFloat32) l.dtype = pipeline::DType::kFloat32;
    return l;
  }
  Result<int> AddView(const core::View& v) override {
    added.push_back(core::ViewToString(v));
    return static_cast<int>(added.size());
  }
  std::vector<std::string> added;

 private:
  core::View own_;
};

constexpr uint64_t kCapacity = 10;  // images a region holds

ViewGroupsConfig Config(int views_max, uint64_t room) {
  ViewGroupsConfig c;
  c.who = "leader";
  c.views_max = views_max;
  c.capacity_samples = kCapacity;
  c.room_offset = 1 << 20;
  c.room_bytes = room;
  c.room_option = "view_bytes=" + std::to_string(room);
  return c;
}

uint64_t Bytes(int size) { return kCapacity * 3 * uint64_t(size) * size; }

shm::MemberInfo Member(uint32_t id, uint32_t group) {
  shm::MemberInfo m;
  m.id = id;
  m.group = group;
  return m;
}

TEST(ViewGroupsTest, EqualViewsShareAGroupAndTheLeadersViewIsGroupZero) {
  ViewSource source;
  ViewGroups g(Config(4, 1 << 20), &source);
  auto own = g.Admit("", 0);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->group, 0u);
  auto same_as_own = g.Admit("view(draw=leader)", 1);
  ASSERT_TRUE(same_as_own.ok()) << same_as_own.status().ToString();
  EXPECT_EQ(same_as_own->group, 0u);
  EXPECT_EQ(same_as_own->view_key, own->view_key);
  auto a = g.Admit("view(size=32)", 1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->group, 1u);
  EXPECT_EQ(a->canonical.rfind("view(size=32,", 0), 0u) << a->canonical;
  // The same view written otherwise (its canonical form is equal): the same group.
  auto b = g.Admit("size=32,crop=random,flip=true", 0b11);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->group, 1u);
  EXPECT_EQ(b->view_key, a->view_key);
  auto c = g.Admit("view(size=32,flip=0)", 0b11);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->group, 2u);
  EXPECT_NE(c->view_key, a->view_key);
  EXPECT_EQ(g.groups(), 3);
}

TEST(ViewGroupsTest, RefusalsNameTheirCauseAndWhatToDo) {
  ViewSource source;
  ViewGroups one(Config(1, 0), &source);
  auto r = one.Admit("view(size=32)", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("views_max=1"), std::string::npos) << r.status().message();

  ViewGroups two(Config(2, 1 << 20), &source);
  ASSERT_TRUE(two.Admit("view(size=32)", 1).ok());
  r = two.Admit("view(size=48)", 0b11);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("over views_max=2"), std::string::npos);
  EXPECT_NE(r.status().message().find("view(size=32,"), std::string::npos);  // in use

  r = two.Admit("view(szie=32)", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown key 'szie'"), std::string::npos);
  r = two.Admit("view(size=300)", 1);  // the source's refusal
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("too large"), std::string::npos);

  ViewGroups tight(Config(4, Bytes(32) + 100), &source);
  ASSERT_TRUE(tight.Admit("view(size=32)", 1).ok());
  r = tight.Admit("view(size=16)", 0b11);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find(std::to_string(Bytes(16)) + " bytes per slot"), std::string::npos) << m;
  EXPECT_NE(m.find("start the leader with view_bytes=1m"), std::string::npos) << m;

  ViewGroups none(Config(4, 1 << 20), nullptr);
  ViewGroupsConfig elsewhere = Config(4, 1 << 20);
  elsewhere.own_view_only = "the external iterable makes one kind of image";
  ViewGroups external(elsewhere, &source);
  for (ViewGroups* g : {&none, &external}) {
    r = g->Admit("view(size=32)", 1);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("makes its own view only"), std::string::npos);
    EXPECT_TRUE(g->Admit("", 1).ok());  // the leader's view is always served
  }
  ViewGroups staged(Config(4, 1 << 20), &source);
  staged.RefuseViews("the GPU data plane stages the leader's view only");
  r = staged.Admit("view(size=32)", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("GPU data plane"), std::string::npos);
}

TEST(ViewGroupsTest, AGroupWithoutMembersGivesItsIndexAndRoomToTheNextView) {
  ViewSource source;
  ViewGroups g(Config(3, Bytes(32) + Bytes(16)), &source);
  auto a = g.Admit("view(size=32)", 1);
  auto b = g.Admit("view(size=16)", 0b11);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->group, 1u);
  EXPECT_EQ(b->group, 2u);
  // While group 1 has members, no room (and no group) is left for a third view.
  EXPECT_FALSE(g.Admit("view(size=24)", 0b111).ok());
  // Group 1's last member is gone: its room goes to the next view, in its index.
  auto c = g.Admit("view(size=24)", 0b101);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->group, 1u);
  std::vector<shm::MemberInfo> members = {Member(0, 0), Member(3, 1), Member(5, 2)};
  auto regions = g.RegionsFor(members, ~0ULL, source.Layout(64), 0);
  ASSERT_TRUE(regions.ok()) << regions.status().ToString();
  ASSERT_EQ(regions->size(), 3u);
  const GroupRegion& r1 = (*regions)[1];
  const GroupRegion& r2 = (*regions)[2];
  EXPECT_EQ(r1.group, 1u);
  EXPECT_EQ(r1.view_key, c->view_key);
  EXPECT_EQ(r1.sample.height, 24);
  EXPECT_EQ(r2.sample.height, 16);
  // The regions lie in the room and do not overlap.
  const uint64_t lo = 1 << 20, hi = lo + Bytes(32) + Bytes(16);
  EXPECT_GE(r1.offset, lo);
  EXPECT_LE(r1.offset + Bytes(24), hi);
  EXPECT_GE(r2.offset, lo);
  EXPECT_LE(r2.offset + Bytes(16), hi);
  EXPECT_TRUE(r1.offset + Bytes(24) <= r2.offset || r2.offset + Bytes(16) <= r1.offset);
  EXPECT_EQ((*regions)[0].offset, 0u);  // the leader's view: at the front
  // Each view was given to the source once, at its first fill.
  EXPECT_EQ(source.added.size(), 2u);
  ASSERT_TRUE(g.RegionsFor(members, ~0ULL, source.Layout(64), 0).ok());
  EXPECT_EQ(source.added.size(), 2u);
}

TEST(ViewGroupsTest, APositionIsMadeForTheGroupsOfItsReceiversOnly) {
  ViewSource source;
  ViewGroups g(Config(4, 1 << 22), &source);
  ASSERT_TRUE(g.Admit("view(size=32)", 1).ok());
  ASSERT_TRUE(g.Admit("view(size=16)", 0b11).ok());
  const std::vector<shm::MemberInfo> members = {Member(0, 0), Member(1, 1), Member(2, 2)};
  auto groups_of = [&](uint64_t only) {
    std::vector<uint32_t> out;
    auto r = g.RegionsFor(members, only, source.Layout(64), 0);
    EXPECT_TRUE(r.ok());
    if (r.ok())
      for (const GroupRegion& x : *r) out.push_back(x.group);
    return out;
  };
  EXPECT_EQ(groups_of(~0ULL), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(groups_of(1ULL << 0), std::vector<uint32_t>{});  // the leader's view alone
  EXPECT_EQ(groups_of(1ULL << 2), (std::vector<uint32_t>{2}));  // a replay to one joiner
  EXPECT_EQ(groups_of((1ULL << 0) | (1ULL << 1)), (std::vector<uint32_t>{0, 1}));
}

// A view with a schedule of sizes by epoch: one group whatever spelling, a region of its
// largest size, each epoch's regions at that epoch's size from one view given to the source
// (made at a per-batch size), and the room refusal naming its largest size.
TEST(ViewGroupsTest, AScheduledViewIsOneGroupMadeAtEachEpochsSize) {
  ViewSource source;
  ViewGroupsConfig config = Config(3, Bytes(32) + Bytes(24));
  config.epochs = 6;
  ViewGroups g(config, &source);
  auto a = g.Admit("view(resize=16@0:32@2:24@4)", 1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto same = g.Admit("view( resize = 16 : 16@1 : 32@2 : 24@4 )", 0b11);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->group, a->group);
  EXPECT_EQ(same->view_key, a->view_key);
  EXPECT_EQ(a->canonical.rfind("view(resize=16@0:32@2:24@4,crop=random,", 0), 0u) << a->canonical;
  // A fixed view of one of its sizes is another group; it does not fit beside a 32-px region.
  auto fixed = g.Admit("view(size=32)", 0b11);
  ASSERT_FALSE(fixed.ok());
  auto small = g.Admit("view(size=24)", 0b11);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_NE(small->group, a->group);
  const std::vector<shm::MemberInfo> members = {Member(0, 0), Member(1, a->group)};
  const int want[] = {16, 16, 32, 32, 24, 24};
  for (uint64_t epoch = 0; epoch < 6; ++epoch) {
    auto r = g.RegionsFor(members, ~0ULL, source.Layout(64), epoch);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->size(), 2u);
    const GroupRegion& region = (*r)[1];
    EXPECT_EQ(region.image_size, want[epoch]) << "epoch " << epoch;
    EXPECT_EQ(region.sample.height, want[epoch]) << "epoch " << epoch;
    EXPECT_EQ(region.view_key, a->view_key);
  }
  ASSERT_EQ(source.added.size(), 1u);  // one view, at its largest size
  EXPECT_EQ(source.added[0].rfind("view(size=32,", 0), 0u) << source.added[0];
  // Status: its size at the epoch last made.
  shm::StreamStatus st{};
  g.FillStatus(&st);
  ASSERT_EQ(st.view_groups, 3u);
  EXPECT_EQ(st.groups[1].image_size, 24u);
  EXPECT_EQ(st.groups[2].image_size, 24u);  // the fixed view
  EXPECT_EQ(st.groups[1].slot_bytes, Bytes(32));
  // Refusals: no room for its largest size; a step past the run; a size the source refuses.
  ViewGroups tight(Config(3, Bytes(24)), &source);
  auto room = tight.Admit("view(resize=16@0:32@2)", 1);
  ASSERT_FALSE(room.ok());
  EXPECT_NE(room.status().message().find("3x32x32 uint8 chw, its largest scheduled size"),
            std::string::npos) << room.status().message();
  auto past = g.Admit("view(resize=16@0:24@6)", 0b11);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("its size 24 from epoch 6 is never made: the leader "
                                         "runs 6 epochs (0..5)"),
            std::string::npos) << past.status().message();
  auto large = g.Admit("view(resize=16@0:300@2)", 0b11);
  ASSERT_FALSE(large.ok());
  EXPECT_NE(large.status().message().find("size 300 is too large here"), std::string::npos)
      << large.status().message();
}

}  // namespace
}  // namespace batchcast::producer
