// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// core::View: the spec text, the canonical form, the 128-byte join-message form and the
// refusals (docs/pipeline.md, "Views").
#include "core/view.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace batchcast::core {
namespace {

View Leader() {
  Options o;
  o.image_size = 224;
  o.crop = "random";
  o.flip = true;
  o.normalize = true;
  auto v = ViewFromOptions(o);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return *v;
}

void ExpectError(std::string_view spec, std::string_view fragment) {
  auto v = ParseView(spec, Leader());
  ASSERT_FALSE(v.ok()) << spec;
  EXPECT_NE(v.status().message().find(fragment), std::string::npos)
      << spec << ": " << v.status().message();
}

TEST(ViewTest, TheOptionsGiveTheLeadersViewOnTheLeadersDraw) {
  const View v = Leader();
  EXPECT_EQ(v.image_size, 224);
  EXPECT_EQ(v.crop, ViewCrop::kRandom);
  EXPECT_EQ(v.dtype, ViewDType::kFloat32);  // normalize implies float32
  EXPECT_EQ(v.draw, kLeaderDraw);
  EXPECT_EQ(ViewDrawSeed(42, v), 42u);  // today's stream
  EXPECT_EQ(ViewToString(v),
            "view(size=224,crop=random,scale=0.08:1,flip=1,normalize=1,mean=0.485:0.456:0.406,"
            "std=0.229:0.224:0.225,dtype=float32,layout=chw,draw=leader)");
}

TEST(ViewTest, APartialSpecKeepsTheBaseButDrawsOnItsOwn) {
  auto v = ParseView("view(size=160)", Leader());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->image_size, 160);
  EXPECT_TRUE(v->flip);
  EXPECT_TRUE(v->normalize);
  EXPECT_EQ(v->draw, kAutoDraw);
  // Without the wrapper, with spaces, and every key.
  auto w = ParseView(" size = 96 , crop=center, flip=false, normalize=0, dtype=uint8, "
                     "layout=hwc, draw=12 ", Leader());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->crop, ViewCrop::kCenter);
  EXPECT_EQ(w->layout, ViewLayout::kHWC);
  EXPECT_EQ(w->dtype, ViewDType::kUint8);
  EXPECT_EQ(w->draw, 12u);
  EXPECT_EQ(ViewToString(*w),
            "view(size=96,crop=center,flip=0,normalize=0,dtype=uint8,layout=hwc,draw=12)");
}

TEST(ViewTest, EqualMeaningsAreEqualViews) {
  const View base = Leader();
  // Three equal values are one; a crop scale does not matter without crop=random.
  auto a = ParseView("view(size=64,crop=center,normalize=1,mean=0.5:0.5:0.5,std=0.25)", base);
  auto b = ParseView("view(size=64,crop=center,normalize=1,mean=0.5,std=0.25:0.25:0.25)", base);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b);
  EXPECT_EQ(ViewKey(*a), ViewKey(*b));
  View c = *a;
  c.crop_scale_min = 0.5;
  EXPECT_TRUE(c == *a);
  // Any field that changes the output makes another view; so does the draw.
  for (const char* other : {"view(size=65,crop=center,normalize=1,mean=0.5,std=0.25)",
                            "view(size=64,crop=none,normalize=1,mean=0.5,std=0.25)",
                            "view(size=64,crop=center,normalize=1,mean=0.5,std=0.25,flip=0)",
                            "view(size=64,crop=center,normalize=1,mean=0.5,std=0.26)",
                            "view(size=64,crop=center,normalize=1,mean=0.5,std=0.25,layout=hwc)",
                            "view(size=64,crop=center,normalize=1,mean=0.5,std=0.25,draw=3)"}) {
    auto o = ParseView(other, base);
    ASSERT_TRUE(o.ok()) << other;
    EXPECT_FALSE(*o == *a) << other;
    EXPECT_NE(ViewKey(*o), ViewKey(*a)) << other;
  }
}

TEST(ViewTest, DrawsAreStableDistinctAndNamed) {
  const View base = Leader();
  auto a = ParseView("view(size=160)", base), a2 = ParseView("view(flip=1,size=160)", base);
  auto b = ParseView("view(size=192)", base);
  auto n1 = ParseView("view(size=160,draw=7)", base), n2 = ParseView("view(size=192,draw=7)", base);
  ASSERT_TRUE(a.ok() && a2.ok() && b.ok() && n1.ok() && n2.ok());
  EXPECT_EQ(ViewDrawKey(*a), ViewDrawKey(*a2));   // the same view: the same draw
  EXPECT_NE(ViewDrawKey(*a), ViewDrawKey(*b));    // another view: its own draw
  EXPECT_NE(ViewDrawKey(*a), kLeaderDraw);
  EXPECT_GT(ViewDrawKey(*a), kMaxNamedDraw);      // never a named draw
  EXPECT_EQ(ViewDrawSeed(1, *n1), ViewDrawSeed(1, *n2));  // named: shared
  EXPECT_NE(ViewDrawSeed(1, *n1), ViewDrawSeed(2, *n1));  // and seeded
  EXPECT_NE(ViewDrawSeed(1, *a), 1u);
}

TEST(ViewTest, TheTextAndTheWireFormRoundTripExactly) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.01, 1.0);
  for (int i = 0; i < 200; ++i) {
    View v;
    v.image_size = 1 + int(rng() % 1024);
    v.crop = static_cast<ViewCrop>(rng() % 3);
    v.crop_scale_min = u(rng);
    v.crop_scale_max = std::max(v.crop_scale_min, u(rng));
    v.flip = rng() % 2;
    v.normalize = rng() % 2;
    v.mean = {u(rng), u(rng), u(rng)};
    v.std = {u(rng), u(rng), u(rng)};
    v.mean_count = rng() % 2 ? 1 : 3;
    v.std_count = rng() % 2 ? 1 : 3;
    v.dtype = static_cast<ViewDType>(rng() % 2);
    v.layout = static_cast<ViewLayout>(rng() % 2);
    v.draw = rng() % 3 == 0 ? kAutoDraw : rng() % 2 ? kLeaderDraw : 1 + rng() % kMaxNamedDraw;
    ASSERT_TRUE(ValidateView(v).ok()) << ValidateView(v).ToString();
    const View canonical = CanonicalView(v);
    auto text = ParseView(ViewToString(v), View{});
    ASSERT_TRUE(text.ok()) << ViewToString(v) << ": " << text.status().ToString();
    const ViewWire a = EncodeView(*text), b = EncodeView(canonical);
    EXPECT_EQ(std::memcmp(&a, &b, sizeof(a)), 0) << ViewToString(v);
    auto back = DecodeView(EncodeView(v));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(*back == v);
    EXPECT_EQ(ViewToString(*back), ViewToString(v));
  }
}

TEST(ViewTest, DamagedWireFormsAreRefused) {
  const ViewWire good = EncodeView(Leader());
  ASSERT_TRUE(DecodeView(good).ok());
  // Every single-byte change is refused or decodes to another valid view; none crashes, and
  // a change in a header, enum, count or reserved byte is always refused.
  for (size_t byte = 0; byte < sizeof(ViewWire); ++byte) {
    for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      ViewWire w = good;
      reinterpret_cast<uint8_t*>(&w)[byte] ^= flip;
      auto v = DecodeView(w);
      // Magic, version, crop, dtype, the counts and reserved bytes: never valid when changed
      // (the size, flags, layout, draw and numbers may change into another valid view).
      const bool refused = byte < 6 || byte == 8 || byte == 10 || (byte >= 12 && byte < 16) ||
                           byte >= 88;
      if (refused) {
        EXPECT_FALSE(v.ok()) << "byte " << byte << " ^ " << int(flip);
      }
      if (v.ok()) {
        EXPECT_TRUE(ValidateView(*v).ok());
      }
    }
  }
  ViewWire w = good;
  w.version = 2;
  auto v = DecodeView(w);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("another Batchcast version"), std::string::npos);
  w = good;
  w.mean_count = 3;  // the leader's mean has three different values: fine
  EXPECT_TRUE(DecodeView(w).ok());
  w.mean[1] = w.mean[0] = w.mean[2];  // three equal values must be sent as one
  EXPECT_FALSE(DecodeView(w).ok());
}

// The one split of a spec into items (ParseView's, and the view schedules' parser's): keys
// and values trimmed of any space (tabs and newlines too), 0-based places of each item and
// value, the wrapper's ')' not in the last item, what is wrong with the wrapper reported
// beside items split all the same.
TEST(ViewTest, OneSplitOfASpecIntoItems) {
  const ViewSpecItems a = SplitViewSpec(" view( size = 96 ,\n\tflip=1,crop)  ");
  EXPECT_TRUE(a.wrapper.ok()) << a.wrapper.ToString();
  ASSERT_EQ(a.items.size(), 3u);
  EXPECT_EQ(a.items[0].key, "size");
  EXPECT_EQ(a.items[0].value, "96");
  EXPECT_EQ(a.items[0].begin, 6u);
  EXPECT_EQ(a.items[0].end, 17u);
  EXPECT_EQ(a.items[0].value_begin, 14u);
  EXPECT_TRUE(a.items[0].has_equals);
  EXPECT_EQ(a.items[1].key, "flip");
  EXPECT_EQ(a.items[1].value, "1");
  EXPECT_EQ(a.items[1].begin, 18u);
  EXPECT_EQ(a.items[2].key, "crop");
  EXPECT_FALSE(a.items[2].has_equals);
  EXPECT_EQ(a.items[2].value_begin, a.items[2].end);
  EXPECT_EQ(a.items[2].end, 31u);  // before the ')'
  // Without a wrapper the items start at the first non-space; a '(' after the first '=' is
  // a value's.
  const ViewSpecItems b = SplitViewSpec("  size=8,resize=resize(min=1,max=2)");
  EXPECT_TRUE(b.wrapper.ok());
  ASSERT_EQ(b.items.size(), 3u);
  EXPECT_EQ(b.items[0].begin, 2u);
  EXPECT_EQ(b.items[1].value, "resize(min=1");
  EXPECT_EQ(b.items[2].key, "max");  // what ParseView then refuses as an unknown key
  const ViewSpecItems c = SplitViewSpec("view(size=8");
  EXPECT_NE(c.wrapper.message().find("missing ')' at column 12"), std::string::npos);
  ASSERT_EQ(c.items.size(), 1u);
  EXPECT_EQ(c.items[0].value, "8");
  const ViewSpecItems d = SplitViewSpec("vue(size=8)");
  EXPECT_NE(d.wrapper.message().find("expected 'view(' at column 1, got 'vue('"),
            std::string::npos) << d.wrapper.ToString();
  ASSERT_EQ(d.items.size(), 1u);
  EXPECT_EQ(d.items[0].key, "size");
  EXPECT_TRUE(SplitViewSpec("  ").items.empty());
  EXPECT_TRUE(SplitViewSpec("view()").items.empty());
}

TEST(ViewTest, BadSpecsNameTheKeyAndTheColumn) {
  ExpectError("view(szie=160)", "unknown key 'szie' at column 6 (did you mean 'size'?)");
  ExpectError("view(size=160", "missing ')'");
  ExpectError("views(size=160)", "expected 'view('");
  ExpectError("view(size=abc)", "'abc' is not an integer for key 'size' at column 11");
  ExpectError("view(size=0)", "crop=random needs a size > 0");
  ExpectError("view(size=20000)", "size must be in [1, 16384]");
  ExpectError("view(crop=rnadom)", "key 'crop' must be none|center|random, got 'rnadom' at "
                                   "column 11 (did you mean 'random'?)");
  ExpectError("view(scale=0.5)", "'scale' is min:max");
  ExpectError("view(scale=0.5:0.2)", "0 < min <= max <= 1");
  ExpectError("view(crop=center,scale=0.2:1)", "'scale' applies to crop=random only");
  ExpectError("view(flip=yes)", "key 'flip' must be 0|1|true|false, got 'yes'");
  ExpectError("view(normalize=0,mean=0.5)", "'mean'/'std' apply with normalize=1 only");
  ExpectError("view(mean=0.1:0.2)", "'mean' has 2 values");
  ExpectError("view(std=0:1:1)", "non-zero std");
  ExpectError("view(mean=x)", "'x' is not a number for 'mean' at column 11");
  ExpectError("view(dtype=uint8)", "dtype=uint8 cannot hold normalized values");
  ExpectError("view(layout=nchw)", "key 'layout' must be chw|hwc");
  ExpectError("view(draw=0)", "key 'draw' must be leader, auto or a number in [1, 4294967295]");
  ExpectError("view(draw=4294967296)", "key 'draw' must be leader, auto");
  ExpectError("view(size=1,size=2)", "duplicate key 'size'");
  ExpectError("view(size)", "expected '=' after key 'size'");
  ExpectError("view(size=)", "empty value for key 'size'");
  Options o;
  o.normalize = true;
  o.std = "0.2,0,0.2";
  auto v = ViewFromOptions(o);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), "option 'std' = '0.2,0,0.2' has a zero");
}

}  // namespace
}  // namespace batchcast::core
