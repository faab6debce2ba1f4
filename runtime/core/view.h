// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A view: how a consumer wants its images made from a decoded sample (docs/pipeline.md,
// "Views"): output size, crop policy and its parameters, flip, normalisation, dtype, layout,
// and which random draw its crop and flip take. Consumers with equal views form a group; the
// leader decodes each sample once and makes every group's tensor from that decode.
//
// Three forms, one meaning:
//   View        the parsed, validated value (this header);
//   spec text   view(size=160,crop=random,scale=0.08:1,flip=1,normalize=1,
//                    mean=0.485:0.456:0.406,std=0.229:0.224:0.225,dtype=float32,layout=chw,
//                    draw=auto)       -- what users write; ViewToString gives it back exactly;
//   ViewWire    128 bytes, fixed layout, what a join message carries (EncodeView/DecodeView).
// Two views are equal when their canonical forms are (fields that do not apply are cleared:
// the crop scale without crop=random, mean/std without normalize).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"

namespace batchcast::core {

enum class ViewCrop : uint8_t { kNone = 0, kCenter = 1, kRandom = 2 };
enum class ViewDType : uint8_t { kUint8 = 0, kFloat32 = 1 };
enum class ViewLayout : uint8_t { kCHW = 0, kHWC = 1 };

// The random draw a view's crop box and flip come from (docs/pipeline.md, "Views"):
//   kLeaderDraw  the leader's own stream, a pure function of (seed, epoch, sample): what a
//                pipeline without views draws, so the leader's view keeps today's batches;
//   kAutoDraw    (the default of a declared view) a draw of this view's own, derived from
//                its canonical form: distinct views draw independently, and a view draws
//                the same whatever other views are attached or in what order they came;
//   1..2^32-1    a named draw: views that name the same number share their draws (equal
//                crop parameters then give the same box in every view; sizes may differ).
inline constexpr uint64_t kLeaderDraw = 0;
inline constexpr uint64_t kAutoDraw = UINT64_MAX;
inline constexpr uint64_t kMaxNamedDraw = UINT32_MAX;

inline constexpr int kMaxViewImageSize = 16384;

struct View {
  int image_size = 0;  // output height = width; 0: the dataset's own size (raw, crop=none)
  ViewCrop crop = ViewCrop::kNone;
  double crop_scale_min = 0.08, crop_scale_max = 1.0;  // crop=random: area fraction range
  bool flip = false;                                   // horizontal, p = 0.5
  bool normalize = false;                              // (x/255 - mean) / std; float32
  // mean and std: mean_count / std_count values (1: every channel; 3: per channel).
  std::array<double, 3> mean{0.485, 0.456, 0.406}, std{0.229, 0.224, 0.225};
  int mean_count = 3, std_count = 3;
  ViewDType dtype = ViewDType::kUint8;
  ViewLayout layout = ViewLayout::kCHW;
  uint64_t draw = kAutoDraw;
};

// The canonical form: fields that do not apply cleared (so that equal meanings compare
// equal), normalize implying float32, three equal mean (std) values written as one.
View CanonicalView(const View& view);
bool operator==(const View& a, const View& b);

// Range and consistency checks; the message names the field and what to do.
[[nodiscard]] Status ValidateView(const View& view);

// The leader's own view: options image_size, crop, crop_scale_min/max, flip, normalize,
// mean, std (comma-separated), dtype, layout; draw = kLeaderDraw.
[[nodiscard]] Result<View> ViewFromOptions(const Options& options);

// Parses "view(key=value,...)" (the wrapper is optional). Keys not given keep `base`'s value
// (a consumer's partial view over the leader's), except `draw`, which is kAutoDraw unless
// given. Keys: size, crop (none|center|random), scale (min:max, crop=random only), flip and
// normalize (0|1|true|false), mean and std (1 or 3 values, ':'-separated; normalize=1 only),
// dtype (uint8|float32), layout (chw|hwc), draw (leader|auto|1..4294967295). Errors name the
// key and the 1-based column: "view spec: unknown key 'szie' at column 6 (did you mean
// 'size'?)". The result has passed ValidateView.
[[nodiscard]] Result<View> ParseView(std::string_view text, const View& base);

// One comma-separated item of a view spec as SplitViewSpec finds it; indices are 0-based
// into the spec (error messages add 1 for the column).
struct ViewSpecItem {
  std::string_view key;       // trimmed; empty for an item without one
  std::string_view value;     // trimmed text after the first '=' (empty without '=')
  size_t begin = 0, end = 0;  // the item: [begin, end), without its commas
  size_t value_begin = 0;     // the value's first character (after '=' and spaces); end if no '='
  bool has_equals = false;
};

// The one split of a view spec into items, used by ParseView and by the view schedules'
// parser (schedule/view_schedule.h): surrounding spaces are dropped; a '(' before the first
// '=' opens a wrapper, whose ')' at the end is not part of the last item; the rest is split at
// every comma. `wrapper` is Ok, or what ParseView refuses about that wrapper ("view spec:
// expected 'view(' ...", "view spec: missing ')' ..."); the items are split either way.
struct ViewSpecItems {
  std::vector<ViewSpecItem> items;
  Status wrapper;
};
ViewSpecItems SplitViewSpec(std::string_view text);

// The canonical spec text: ParseView(ViewToString(v), any) == CanonicalView(v), bit for bit
// (numbers are written in the shortest form that reads back exactly).
std::string ViewToString(const View& view);

// A view as a join message carries it: 128 bytes, host byte order (the leader and its
// consumers share a node), reserved bytes zero.
struct ViewWire {
  uint32_t magic;    // kViewWireMagic
  uint16_t version;  // kViewWireVersion
  uint16_t image_size;
  uint8_t crop, flags, dtype, layout;  // flags: bit 0 flip, bit 1 normalize
  uint8_t mean_count, std_count;
  uint8_t reserved0[2];
  uint64_t draw;
  double crop_scale_min, crop_scale_max;
  double mean[3], std[3];
  uint8_t reserved[40];
};
static_assert(sizeof(ViewWire) == 128, "ViewWire is part of the join message");
inline constexpr uint32_t kViewWireMagic = 0x57564342;  // "BCVW"
inline constexpr uint16_t kViewWireVersion = 1;

ViewWire EncodeView(const View& view);  // of the canonical form
// Refuses a wrong magic or version, non-zero reserved bytes, unknown enum values and
// anything ValidateView refuses ("view message: ...").
[[nodiscard]] Result<View> DecodeView(const ViewWire& wire);

// A 64-bit key of the canonical form (groups, logs): equal views, equal keys.
uint64_t ViewKey(const View& view);
// The draw the view takes, resolved: kLeaderDraw, the named draw, or for kAutoDraw a key
// derived from the rest of the canonical form (never 0).
uint64_t ViewDrawKey(const View& view);
// The seed of a view's draws: `seed` itself for kLeaderDraw (today's stream), else a mix of
// seed and the draw key. A pipeline without views, built with this seed, draws what the
// view draws (the tests compare against that).
uint64_t ViewDrawSeed(uint64_t seed, const View& view);

const char* ViewCropName(ViewCrop crop);

}  // namespace batchcast::core
