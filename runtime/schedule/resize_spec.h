// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The progressive-resizing spec (docs/progressive-resizing.md):
//
//   resize(min=96,max=224,step=32,upgrade=0.25,mode=mixed,lr=linear,
//          max_batch=512,final_epochs=1,policy=random)
//   resize(sizes=96:128:160:224,upgrade=0.25)
//
// and its config-file form, flat `key = value` lines as runtime/core/options.cc reads
// them: either `resize = "resize(...)"` or one `resize_<key> = value` line per key.
// Parse errors give the 1-based column of the offending text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::schedule {

enum class ResizeMode {
  kMixed,       // every epoch covers every sample; each batch holds one size
  kExhaustive,  // an epoch trains only the smallest non-empty bucket
};

enum class LrRule {
  kLinear,  // eta_S = B_S (linear scaling rule)
  kSqrt,    // eta_S = sqrt(B_S)
  kNone,    // eta_S = 1
};

struct ResizeSpec {
  // Either min/max/step (max always included) or an explicit ascending list.
  int min_size = 0;
  int max_size = 0;
  int step = 32;
  std::vector<int> sizes;  // explicit list; when set, min/max/step are unused
  double upgrade = 0.25;   // fraction of all samples moved up one bucket per epoch
  ResizeMode mode = ResizeMode::kMixed;
  LrRule lr = LrRule::kLinear;
  int64_t max_batch = 0;          // cap on a scaled batch size in samples (0 = no cap)
  int final_epochs = 1;           // the last K epochs of the run train at full size
  std::string policy = "random";  // which samples upgrade (upgrade_policy.h)
};

inline constexpr int kMaxResizeBuckets = 64;
inline constexpr int kMaxResizeImageSize = 16384;

// Parses "resize(...)". The error names the column: "resize spec: unknown key 'upgarde'
// at column 28 (did you mean 'upgrade'?)". The result has passed ValidateResizeSpec.
[[nodiscard]] Result<ResizeSpec> ParseResizeSpec(std::string_view text);

// Builds a spec from config-file pairs. Keys other than `resize` and `resize_<key>` are
// ignored (they belong to other modules); `resize` holds a full spec string, and
// `resize_<key>` lines set one key each and override it. `where` names the source for
// messages ("run.toml").
[[nodiscard]] Result<ResizeSpec> ResizeSpecFromConfig(
    const std::vector<std::pair<std::string, std::string>>& pairs, std::string_view where);

// Reads a config file (`key = value`, `#` comments, quotes stripped, `[table]` lines
// skipped, as runtime/core/options.cc does) and calls ResizeSpecFromConfig.
[[nodiscard]] Result<ResizeSpec> ResizeSpecFromConfigFile(const std::string& path);

// Range checks: 0 < min <= max, step > 0, sizes ascending and positive, 0 < upgrade <= 1,
// max_batch >= 0, final_epochs >= 0, a known policy, at most kMaxResizeBuckets buckets.
[[nodiscard]] Status ValidateResizeSpec(const ResizeSpec& spec);

// The bucket sizes: min, min+step, ... with max always included; or the explicit list.
std::vector<int> BucketSizes(const ResizeSpec& spec);

// Canonical text form; ParseResizeSpec(ResizeSpecToString(s)) gives s back.
std::string ResizeSpecToString(const ResizeSpec& spec);

const char* ResizeModeName(ResizeMode mode);
const char* LrRuleName(LrRule rule);

}  // namespace batchcast::schedule
