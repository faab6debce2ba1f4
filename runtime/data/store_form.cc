// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/store_form.h"

#include <algorithm>
#include <charconv>

#include "core/errors.h"

namespace batchcast::data {
namespace {

constexpr char kAccepted[] =
    "expected encoded, decoded, resized:<size> (shorter side, e.g. resized:160), "
    "resized:<W>x<H> (e.g. resized:64x64) or buckets:<sizes> (e.g. buckets:96,128)";

// A size in pixels in [1, 16384], the whole of `text`.
bool ParseSide(std::string_view text, int* out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && *out >= 1 && *out <= 16384;
}

}  // namespace

std::string StoreForm::ToString() const {
  switch (kind) {
    case Kind::kEncoded: return "encoded";
    case Kind::kDecoded: return "decoded";
    case Kind::kResized:
      return short_side > 0 ? fmt::format("resized:{}", short_side)
                            : fmt::format("resized:{}x{}", width, height);
    case Kind::kBuckets: {
      std::string s = "buckets:";
      for (size_t i = 0; i < bucket_sizes.size(); ++i)
        s += (i ? "," : "") + std::to_string(bucket_sizes[i]);
      return s;
    }
  }
  return "encoded";
}

Result<StoreForm> ParseStoreForm(std::string_view text) {
  StoreForm f;
  if (text == "encoded") return f;
  if (text == "decoded") {
    f.kind = StoreForm::Kind::kDecoded;
    return f;
  }
  const size_t colon = text.find(':');
  const std::string_view head = text.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  if (head == "resized") {
    f.kind = StoreForm::Kind::kResized;
    const size_t x = arg.find('x');
    if (arg.empty())
      return InvalidArgumentError("convert: --store '{}' has no size: give the shorter side "
                                  "(resized:160) or the exact size (resized:64x64)", text);
    bool ok = x == std::string_view::npos
                  ? ParseSide(arg, &f.short_side)
                  : ParseSide(arg.substr(0, x), &f.width) && ParseSide(arg.substr(x + 1), &f.height);
    if (!ok)
      return InvalidArgumentError("convert: --store '{}': '{}' is not a size in [1, 16384] "
                                  "(resized:160 or resized:64x64)", text, arg);
    return f;
  }
  if (head == "buckets") {
    f.kind = StoreForm::Kind::kBuckets;
    size_t start = 0;
    while (start <= arg.size()) {
      size_t end = std::min(arg.find(',', start), arg.size());
      int v = 0;
      if (!ParseSide(arg.substr(start, end - start), &v) ||
          (!f.bucket_sizes.empty() && v <= f.bucket_sizes.back()))
        return InvalidArgumentError("convert: --store '{}': bucket sizes must be strictly "
                                    "ascending sizes in [1, 16384], e.g. buckets:96,128,160",
                                    text);
      f.bucket_sizes.push_back(v);
      start = end + 1;
    }
    return f;
  }
  return InvalidArgumentError("convert: --store '{}' is not a stored form: {}", text, kAccepted);
}

void ShorterSideSize(int width, int height, int size, int* out_width, int* out_height) {
  const double f = std::min(1.0, double(size) / std::min(width, height));
  *out_width = std::max(1, int(width * f + 0.5));
  *out_height = std::max(1, int(height * f + 0.5));
}

}  // namespace batchcast::data
