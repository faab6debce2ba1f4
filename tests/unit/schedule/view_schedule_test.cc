// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A view's schedule of sizes by epoch (schedule/view_schedule.h): its syntax, canonical
// form, key, and refusals by message (column, cause, what to write instead).
#include "schedule/view_schedule.h"

#include <gtest/gtest.h>

#include "core/errors.h"
#include "core/random.h"

namespace batchcast::schedule {
namespace {

core::View Base() {
  core::View v;
  v.image_size = 40;
  v.crop = core::ViewCrop::kRandom;
  v.flip = true;
  return v;
}

ScheduledView Parse(std::string_view text) {
  auto v = ParseScheduledView(text, Base());
  EXPECT_TRUE(v.ok()) << text << ": " << v.status().ToString();
  return v.ok() ? *v : ScheduledView{};
}

std::string Refusal(std::string_view text) {
  auto v = ParseScheduledView(text, Base());
  EXPECT_FALSE(v.ok()) << text;
  return v.ok() ? "" : v.status().message();
}

TEST(ViewScheduleTest, StepsBySizeAndEpoch) {
  const ScheduledView v = Parse("view(resize=16@0:24@2:32@5,flip=0)");
  ASSERT_EQ(v.schedule.steps.size(), 3u);
  EXPECT_EQ(v.schedule.SizeAt(0), 16);
  EXPECT_EQ(v.schedule.SizeAt(1), 16);
  EXPECT_EQ(v.schedule.SizeAt(2), 24);
  EXPECT_EQ(v.schedule.SizeAt(4), 24);
  EXPECT_EQ(v.schedule.SizeAt(5), 32);
  EXPECT_EQ(v.schedule.SizeAt(1000), 32);
  EXPECT_EQ(v.schedule.MaxSize(), 32);
  EXPECT_EQ(v.view.image_size, 32);  // the view a pipeline makes: its largest size
  EXPECT_FALSE(v.view.flip);
  EXPECT_EQ(v.At(3).image_size, 24);
  EXPECT_EQ(v.schedule.Sizes(), (std::vector<int>{16, 24, 32}));
}

TEST(ViewScheduleTest, OneSizePerEpochWithoutEpochsAndMixedForms) {
  EXPECT_EQ(Parse("resize=16:24:32").schedule.ToString(), "16@0:24@1:32@2");
  EXPECT_EQ(Parse("view(resize=16:24@3:32)").schedule.ToString(), "16@0:24@3:32@4");
  // Consecutive equal sizes fold; the schedule may shrink as well as grow.
  EXPECT_EQ(Parse("view(resize=16@0:16@2:32@3:24@4)").schedule.ToString(), "16@0:32@3:24@4");
  // One size is a fixed view: no schedule, the same group as view(size=...).
  const ScheduledView one = Parse("view(resize=24@0:24@3)");
  EXPECT_TRUE(one.schedule.empty());
  EXPECT_EQ(ScheduledViewToString(one), ScheduledViewToString(Parse("view(size=24)")));
  EXPECT_EQ(ScheduledViewKey(one), core::ViewKey(Parse("view(size=24)").view));
}

TEST(ViewScheduleTest, CanonicalTextReadsBackAndKeysDiffer) {
  const ScheduledView v = Parse(" view( flip=0 , resize = 16@0 : 24@2 ) ");
  const std::string text = ScheduledViewToString(v);
  EXPECT_EQ(text.rfind("view(resize=16@0:24@2,crop=random,", 0), 0u) << text;
  const ScheduledView back = Parse(text);
  EXPECT_EQ(ScheduledViewToString(back), text);
  EXPECT_EQ(ScheduledViewKey(back), ScheduledViewKey(v));
  EXPECT_TRUE(back.view == v.view);
  // Not the key of the fixed view at its largest size, nor of another schedule.
  EXPECT_NE(ScheduledViewKey(v), core::ViewKey(Parse("view(size=24,flip=0)").view));
  EXPECT_NE(ScheduledViewKey(v), ScheduledViewKey(Parse("view(resize=16@0:24@3,flip=0)")));
  EXPECT_NE(ScheduledViewKey(v), ScheduledViewKey(Parse("view(resize=16@0:24@2,flip=1)")));
}

TEST(ViewScheduleTest, RefusalsNameTheColumnTheCauseAndTheFix) {
  EXPECT_NE(Refusal("view(size=24,resize=16:24)").find("'size' at column 6 and 'resize' at column "
                                                       "14 both given"),
            std::string::npos);
  const std::string leader = Refusal("view(resize=resize(min=16,max=32,step=8))");
  EXPECT_NE(leader.find("not a leader's resize(...) schedule at column 13"), std::string::npos)
      << leader;
  EXPECT_NE(leader.find("scales batch sizes"), std::string::npos) << leader;
  EXPECT_NE(leader.find("option 'resize'"), std::string::npos) << leader;
  EXPECT_NE(Refusal("view(resize=16@1:24@3)").find("the first size starts at epoch 0"),
            std::string::npos);
  const std::string order = Refusal("view(resize=16@0:24@3:32@2)");
  EXPECT_NE(order.find("strictly ascending, but 32@2 follows 24@3 at column 23"),
            std::string::npos) << order;
  EXPECT_NE(Refusal("view(resize=16@0:24@0)").find("strictly ascending"), std::string::npos);
  EXPECT_NE(Refusal("view(resize=16::24)").find("an empty step at column 16"), std::string::npos);
  EXPECT_NE(Refusal("view(resize=0:24)").find("size '0' is not an integer in [1, 16384]"),
            std::string::npos);
  EXPECT_NE(Refusal("view(resize=16@x)").find("epoch 'x'"), std::string::npos);
  EXPECT_NE(Refusal("view(resize=16@0:24@4294967296:32)").find("epoch '4294967296' is not an "
                                                               "integer in [0, 4294967295]"),
            std::string::npos);
  EXPECT_NE(Refusal("view(resize=16,resize=24)").find("duplicate key 'resize'"),
            std::string::npos);
  // The rest of the spec is core::ParseView's, columns unchanged by the schedule.
  const std::string typo = Refusal("view(resize=16@0:24@2,szie=3)");
  EXPECT_NE(typo.find("unknown key 'szie' at column 23"), std::string::npos) << typo;
}

// The schedule's parser splits a spec into items as core::ParseView does (one splitter,
// core::SplitViewSpec): a spec over several lines (a config file, a Python string) reads the
// same as on one, and its columns are ParseView's for the same item.
TEST(ViewScheduleTest, ItemsAreSplitAsCoreParseViewSplitsThem) {
  const ScheduledView one = Parse("view(flip=0,resize=16@0:24@2)");
  const ScheduledView lines = Parse("view(flip=0,\n     resize=16@0:24@2\n)");
  EXPECT_EQ(lines.schedule.ToString(), one.schedule.ToString());
  EXPECT_EQ(ScheduledViewKey(lines), ScheduledViewKey(one));
  const ScheduledView tab = Parse("view(\tresize =\t16@0:24@2 ,flip=0)");
  EXPECT_EQ(ScheduledViewKey(tab), ScheduledViewKey(one));
  // Without the wrapper, an item's column counts from the spec's first character, spaces
  // before it included, as in ParseView's messages.
  const std::string both = Refusal("  resize=16:24,size=3");
  EXPECT_NE(both.find("'size' at column 16 and 'resize' at column 3 both given"),
            std::string::npos) << both;
  auto typo = core::ParseView("  szie=3", Base());
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("'szie' at column 3"), std::string::npos);
  // A wrapper ParseView refuses is refused with its message.
  EXPECT_NE(Refusal("view(resize=16@0:24@2").find("missing ')' at column 22"), std::string::npos);
  EXPECT_NE(Refusal("vue(resize=16@0:24@2)").find("expected 'view('"), std::string::npos);
}

// Random schedules: the canonical text reads back to the same steps and key, and SizeAt is
// the size of the last step at or before each epoch (a model: the steps as a table).
TEST(ViewScheduleTest, RandomSchedulesRoundTrip) {
  uint64_t rng = 7;
  for (int round = 0; round < 200; ++round) {
    std::string value;
    std::vector<int> table;  // size per epoch, up to the last step
    uint64_t epoch = 0;
    const int steps = 1 + int(Mix64(rng++) % 6);
    for (int k = 0; k < steps; ++k) {
      const int size = 8 + int(Mix64(rng++) % 5) * 8;
      if (k > 0) epoch += 1 + Mix64(rng++) % 3;
      const bool explicit_epoch = Mix64(rng++) % 2 == 0 || k == 0;
      if (!explicit_epoch && k > 0) epoch = table.size();  // an implicit step: the next epoch
      value += fmt::format("{}{}", k == 0 ? "" : ":", size);
      if (explicit_epoch) value += fmt::format("@{}", epoch);
      table.resize(epoch, table.empty() ? size : table.back());
      table.push_back(size);
    }
    const ScheduledView v = Parse("view(resize=" + value + ")");
    for (uint64_t e = 0; e < table.size() + 2; ++e) {
      const int want = table[std::min<size_t>(e, table.size() - 1)];
      if (v.schedule.empty()) EXPECT_EQ(v.view.image_size, want) << value;
      else EXPECT_EQ(v.schedule.SizeAt(e), want) << value << " epoch " << e;
    }
    const ScheduledView back = Parse(ScheduledViewToString(v));
    EXPECT_EQ(back.schedule.ToString(), v.schedule.ToString()) << value;
    EXPECT_EQ(ScheduledViewKey(back), ScheduledViewKey(v)) << value;
  }
}

}  // namespace
}  // namespace batchcast::schedule
