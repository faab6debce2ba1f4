// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/units.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <string>

#include "core/errors.h"

namespace batchcast {
namespace {

std::string Lower(std::string_view text) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return t;
}

bool EndsWith(const std::string& t, std::string_view suffix) {
  return t.size() > suffix.size() &&
         t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `digits` × `mult` into `out`, untouched on failure: false when `digits` is not a whole
// non-negative number or the product leaves int64.
bool Scaled(std::string_view digits, int64_t mult, int64_t* out) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || p != digits.data() + digits.size() || v < 0) return false;
  int64_t product = 0;
  if (__builtin_mul_overflow(v, mult, &product)) return false;
  *out = product;
  return true;
}

}  // namespace

Status ParseSize(std::string_view text, int64_t* bytes) {
  std::string t = Lower(text);
  if (!t.empty() && t.back() == 'b') t.pop_back();
  int64_t mult = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'k': mult = 1LL << 10; break;
      case 'm': mult = 1LL << 20; break;
      case 'g': mult = 1LL << 30; break;
      case 't': mult = 1LL << 40; break;
      default: break;
    }
    if (mult != 1) t.pop_back();
  }
  if (Scaled(t, mult, bytes)) return Status::Ok();
  if (Scaled(t, 1, bytes))
    return InvalidArgumentError("size '{}' is too large (at most {} bytes)", text,
                                std::numeric_limits<int64_t>::max());
  return InvalidArgumentError("'{}' is not a size (e.g. 4096, 64k, 128m, 2g)", text);
}

Status ParseDuration(std::string_view text, int64_t* ms) {
  std::string t = Lower(text);
  int64_t mult = 1;
  if (EndsWith(t, "ms")) t.resize(t.size() - 2);
  else if (EndsWith(t, "s")) { t.pop_back(); mult = 1000; }
  else if (EndsWith(t, "m")) { t.pop_back(); mult = 60000; }
  if (Scaled(t, mult, ms)) return Status::Ok();
  if (Scaled(t, 1, ms))
    return InvalidArgumentError("duration '{}' is too long (at most {} ms)", text,
                                std::numeric_limits<int64_t>::max());
  return InvalidArgumentError("'{}' is not a duration (e.g. 500ms, 10s, 2m)", text);
}

}  // namespace batchcast
