// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/view.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>
#include <vector>

#include "core/errors.h"
#include "core/random.h"
#include "core/suggest.h"

namespace batchcast::core {
namespace {

constexpr std::string_view kKeys[] = {"size", "crop",  "scale", "flip",   "normalize",
                                      "mean", "std",   "dtype", "layout", "draw"};

std::string Column(size_t index) { return fmt::format(" at column {}", index + 1); }

std::string Hint(std::string_view word) {
  std::vector<std::string> keys(std::begin(kKeys), std::end(kKeys));
  const std::string best = ClosestMatch(word, keys);
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// A number as strtod reads it (the options' mean/std are read the same way, so a view and the
// options give the same doubles). `where`: " at column N" for a spec, "" for an option.
Result<double> ParseNumber(std::string_view text, std::string_view key, std::string_view where) {
  const std::string s(text);
  char* end = nullptr;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    return InvalidArgumentError("'{}' is not a number for '{}'{}", text, key, where);
  return v;
}

// "a:b:c" (view spec) or "a,b,c" (options): 1 or 3 numbers.
Status ParseValues(std::string_view text, char separator, std::string_view key, size_t column,
                   bool spec, std::array<double, 3>* values, int* count) {
  std::vector<double> v;
  size_t pos = 0;
  while (true) {
    const size_t end = text.find(separator, pos);
    const std::string_view item = Trim(text.substr(pos, end == std::string_view::npos ? end : end - pos));
    BC_ASSIGN_OR_RETURN(double x, ParseNumber(item, key, spec ? Column(column + pos) : ""));
    v.push_back(x);
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  if (v.size() != 1 && v.size() != 3)
    return InvalidArgumentError("'{}' has {} values; give 1 (every channel) or 3 (R{}G{}B){}", key,
                                v.size(), separator, separator, spec ? Column(column) : "");
  *count = static_cast<int>(v.size());
  for (int c = 0; c < 3; ++c) (*values)[c] = v[v.size() == 1 ? 0 : c];
  return Status::Ok();
}

Result<bool> ParseBool(std::string_view text, std::string_view key, size_t column) {
  if (text == "1" || text == "true") return true;
  if (text == "0" || text == "false") return false;
  return InvalidArgumentError("key '{}' must be 0|1|true|false, got '{}'{}", key, text,
                              Column(column));
}

template <typename E, size_t N>
Result<E> ParseEnum(std::string_view text, std::string_view key,
                    const std::pair<std::string_view, E> (&names)[N], size_t column) {
  std::string list;
  std::vector<std::string> choices;
  for (const auto& [name, value] : names) {
    if (text == name) return value;
    list += (list.empty() ? "" : "|") + std::string(name);
    choices.emplace_back(name);
  }
  const std::string best = ClosestMatch(text, choices);
  return InvalidArgumentError("key '{}' must be {}, got '{}'{}{}", key, list, text,
                              Column(column),
                              best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best));
}

constexpr std::pair<std::string_view, ViewCrop> kCrops[] = {
    {"none", ViewCrop::kNone}, {"center", ViewCrop::kCenter}, {"random", ViewCrop::kRandom}};
constexpr std::pair<std::string_view, ViewDType> kDTypes[] = {{"uint8", ViewDType::kUint8},
                                                              {"float32", ViewDType::kFloat32}};
constexpr std::pair<std::string_view, ViewLayout> kLayouts[] = {{"chw", ViewLayout::kCHW},
                                                                {"hwc", ViewLayout::kHWC}};

Status SetKey(std::string_view key, std::string_view value, size_t column, View* v) {
  if (value.empty()) return InvalidArgumentError("empty value for key '{}'{}", key, Column(column));
  if (key == "size") {
    int size = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), size);
    if (ec != std::errc() || p != value.data() + value.size())
      return InvalidArgumentError("'{}' is not an integer for key 'size'{}", value,
                                  Column(column));
    v->image_size = size;
  } else if (key == "crop") {
    BC_ASSIGN_OR_RETURN(v->crop, ParseEnum(value, key, kCrops, column));
  } else if (key == "scale") {
    const size_t colon = value.find(':');
    if (colon == std::string_view::npos)
      return InvalidArgumentError("'scale' is min:max (area fractions, e.g. 0.08:1), "
                                  "got '{}'{}", value, Column(column));
    BC_ASSIGN_OR_RETURN(v->crop_scale_min,
                        ParseNumber(Trim(value.substr(0, colon)), key, Column(column)));
    BC_ASSIGN_OR_RETURN(v->crop_scale_max, ParseNumber(Trim(value.substr(colon + 1)), key,
                                                       Column(column + colon + 1)));
  } else if (key == "flip") {
    BC_ASSIGN_OR_RETURN(v->flip, ParseBool(value, key, column));
  } else if (key == "normalize") {
    BC_ASSIGN_OR_RETURN(v->normalize, ParseBool(value, key, column));
  } else if (key == "mean") {
    return ParseValues(value, ':', key, column, true, &v->mean, &v->mean_count);
  } else if (key == "std") {
    return ParseValues(value, ':', key, column, true, &v->std, &v->std_count);
  } else if (key == "dtype") {
    BC_ASSIGN_OR_RETURN(v->dtype, ParseEnum(value, key, kDTypes, column));
  } else if (key == "layout") {
    BC_ASSIGN_OR_RETURN(v->layout, ParseEnum(value, key, kLayouts, column));
  } else if (key == "draw") {
    if (value == "leader") v->draw = kLeaderDraw;
    else if (value == "auto") v->draw = kAutoDraw;
    else {
      uint64_t d = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), d);
      if (ec != std::errc() || p != value.data() + value.size() || d == 0 || d > kMaxNamedDraw)
        return InvalidArgumentError("key 'draw' must be leader, auto or a number in "
                                    "[1, {}] (views naming the same number share their random "
                                    "draws), got '{}'{}", kMaxNamedDraw, value, Column(column));
      v->draw = d;
    }
  }
  return Status::Ok();
}

// Cross-key checks on what the spec itself gave.
Status CheckGiven(const std::set<std::string>& given, const View& v) {
  if (given.count("scale") && v.crop != ViewCrop::kRandom)
    return InvalidArgumentError("view spec: 'scale' applies to crop=random only, but crop={}; "
                                "drop 'scale' or set crop=random", ViewCropName(v.crop));
  if ((given.count("mean") || given.count("std")) && !v.normalize)
    return InvalidArgumentError("view spec: 'mean'/'std' apply with normalize=1 only; set "
                                "normalize=1 or drop them");
  if (given.count("dtype") && v.dtype == ViewDType::kUint8 && v.normalize)
    return InvalidArgumentError("view spec: dtype=uint8 cannot hold normalized values; set "
                                "normalize=0 for uint8 output or dtype=float32");
  return Status::Ok();
}

std::string Number(double v) { return fmt::format("{}", v); }  // shortest that reads back exactly

std::string Values(const std::array<double, 3>& values, int count) {
  std::string s = Number(values[0]);
  for (int c = 1; c < count; ++c) s += ":" + Number(values[c]);
  return s;
}

}  // namespace

const char* ViewCropName(ViewCrop crop) {
  switch (crop) {
    case ViewCrop::kNone: return "none";
    case ViewCrop::kCenter: return "center";
    case ViewCrop::kRandom: return "random";
  }
  return "?";
}

View CanonicalView(const View& in) {
  View v = in;
  if (v.crop != ViewCrop::kRandom) v.crop_scale_min = v.crop_scale_max = 0;
  auto one_if_equal = [](std::array<double, 3>* values, int* count) {
    if (*count == 1 || ((*values)[0] == (*values)[1] && (*values)[1] == (*values)[2])) {
      *count = 1;
      (*values)[1] = (*values)[2] = (*values)[0];
    }
  };
  if (v.normalize) {
    v.dtype = ViewDType::kFloat32;
    one_if_equal(&v.mean, &v.mean_count);
    one_if_equal(&v.std, &v.std_count);
  } else {
    v.mean = v.std = {0, 0, 0};
    v.mean_count = v.std_count = 0;
  }
  return v;
}

bool operator==(const View& a, const View& b) {
  const ViewWire x = EncodeView(a), y = EncodeView(b);
  return std::memcmp(&x, &y, sizeof(x)) == 0;
}

Status ValidateView(const View& v) {
  if (v.image_size < 0 || v.image_size > kMaxViewImageSize)
    return InvalidArgumentError("view: size must be in [1, {}] (0: the dataset's own size), got {}",
                                kMaxViewImageSize, v.image_size);
  if (v.crop != ViewCrop::kNone && v.image_size == 0)
    return InvalidArgumentError("view: crop={} needs a size > 0", ViewCropName(v.crop));
  if (v.crop == ViewCrop::kRandom &&
      !(v.crop_scale_min > 0 && v.crop_scale_min <= v.crop_scale_max && v.crop_scale_max <= 1.0))
    return InvalidArgumentError("view: scale must satisfy 0 < min <= max <= 1, got {}:{}",
                                v.crop_scale_min, v.crop_scale_max);
  if (v.normalize) {
    for (int c = 0; c < 3; ++c)
      if (!std::isfinite(v.mean[c]) || !std::isfinite(v.std[c]) || v.std[c] == 0)
        return InvalidArgumentError("view: normalize needs finite mean values and finite, "
                                    "non-zero std values, got mean={} std={}",
                                    Values(v.mean, v.mean_count), Values(v.std, v.std_count));
    if ((v.mean_count != 1 && v.mean_count != 3) || (v.std_count != 1 && v.std_count != 3))
      return InvalidArgumentError("view: mean and std have 1 or 3 values, got {} and {}",
                                  v.mean_count, v.std_count);
  }
  if (v.draw != kAutoDraw && v.draw > kMaxNamedDraw)
    return InvalidArgumentError("view: draw must be leader, auto or in [1, {}], got {}",
                                kMaxNamedDraw, v.draw);
  return Status::Ok();
}

Result<View> ViewFromOptions(const Options& o) {
  View v;
  v.image_size = o.image_size;
  v.crop = o.crop == "center" ? ViewCrop::kCenter
           : o.crop == "random" ? ViewCrop::kRandom : ViewCrop::kNone;
  v.crop_scale_min = o.crop_scale_min;
  v.crop_scale_max = o.crop_scale_max;
  v.flip = o.flip;
  v.normalize = o.normalize;
  if (o.normalize) {
    for (const auto& [key, text, values, count] :
         {std::tuple{"mean", &o.mean, &v.mean, &v.mean_count},
          std::tuple{"std", &o.std, &v.std, &v.std_count}}) {
      Status s = ParseValues(*text, ',', key, 0, false, values, count);
      if (!s.ok()) return s.WithContext(fmt::format("option '{}' = '{}'", key, *text));
    }
    for (double s : v.std)
      if (s == 0) return InvalidArgumentError("option 'std' = '{}' has a zero", o.std);
  }
  v.dtype = o.normalize || o.dtype == "float32" ? ViewDType::kFloat32 : ViewDType::kUint8;
  v.layout = o.layout == "hwc" ? ViewLayout::kHWC : ViewLayout::kCHW;
  v.draw = kLeaderDraw;
  BC_RETURN_IF_ERROR(ValidateView(v).WithContext("the options' view"));
  return CanonicalView(v);
}

ViewSpecItems SplitViewSpec(std::string_view text) {
  ViewSpecItems out;
  size_t pos = 0, end = text.size();
  while (pos < end && IsSpace(text[pos])) ++pos;
  while (end > pos && IsSpace(text[end - 1])) --end;
  const size_t paren = text.find('(', pos);
  if (paren != std::string_view::npos && paren < text.find('=', pos)) {
    if (Trim(text.substr(pos, paren - pos)) != "view")
      out.wrapper = InvalidArgumentError("view spec: expected 'view(' at column {}, got '{}'",
                                         pos + 1, text.substr(pos, paren + 1 - pos));
    if (end > 0 && text[end - 1] == ')') --end;
    else if (out.wrapper.ok())
      out.wrapper = InvalidArgumentError("view spec: missing ')' at column {} (end of spec)",
                                         end + 1);
    pos = paren + 1;
  }
  while (pos < end) {
    size_t stop = text.find(',', pos);
    if (stop == std::string_view::npos || stop > end) stop = end;
    const std::string_view item = text.substr(pos, stop - pos);
    const size_t eq = item.find('=');
    ViewSpecItem it;
    it.key = Trim(item.substr(0, eq));
    it.begin = pos;
    it.end = stop;
    it.has_equals = eq != std::string_view::npos;
    it.value_begin = stop;
    if (it.has_equals) {
      it.value_begin = pos + eq + 1;
      while (it.value_begin < stop && IsSpace(text[it.value_begin])) ++it.value_begin;
      it.value = Trim(item.substr(eq + 1));
    }
    out.items.push_back(it);
    pos = stop + 1;
  }
  return out;
}

Result<View> ParseView(std::string_view text, const View& base) {
  View v = base;
  v.draw = kAutoDraw;
  const ViewSpecItems split = SplitViewSpec(text);
  BC_RETURN_IF_ERROR(split.wrapper);
  std::set<std::string> given;
  for (const ViewSpecItem& it : split.items) {
    const std::string_view key = it.key;
    if (key.empty())
      return InvalidArgumentError("view spec: expected key=value{}", Column(it.begin));
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
      return InvalidArgumentError("view spec: unknown key '{}'{}{}", key, Column(it.begin),
                                  Hint(key));
    if (!it.has_equals)
      return InvalidArgumentError("view spec: expected '=' after key '{}'{}", key,
                                  Column(it.begin));
    if (!given.insert(std::string(key)).second)
      return InvalidArgumentError("view spec: duplicate key '{}'{}", key, Column(it.begin));
    BC_RETURN_IF_ERROR(SetKey(key, it.value, it.value_begin, &v).WithContext("view spec"));
  }
  BC_RETURN_IF_ERROR(CheckGiven(given, v));
  BC_RETURN_IF_ERROR(ValidateView(v).WithContext("view spec"));
  return CanonicalView(v);
}

std::string ViewToString(const View& view) {
  const View v = CanonicalView(view);
  std::string s = fmt::format("view(size={},crop={}", v.image_size, ViewCropName(v.crop));
  if (v.crop == ViewCrop::kRandom)
    s += fmt::format(",scale={}:{}", Number(v.crop_scale_min), Number(v.crop_scale_max));
  s += fmt::format(",flip={},normalize={}", v.flip ? 1 : 0, v.normalize ? 1 : 0);
  if (v.normalize)
    s += fmt::format(",mean={},std={}", Values(v.mean, v.mean_count), Values(v.std, v.std_count));
  s += fmt::format(",dtype={},layout={},draw=", v.dtype == ViewDType::kFloat32 ? "float32" : "uint8",
                   v.layout == ViewLayout::kHWC ? "hwc" : "chw");
  if (v.draw == kLeaderDraw) s += "leader";
  else if (v.draw == kAutoDraw) s += "auto";
  else s += std::to_string(v.draw);
  return s + ")";
}

ViewWire EncodeView(const View& view) {
  const View v = CanonicalView(view);
  ViewWire w;
  std::memset(&w, 0, sizeof(w));
  w.magic = kViewWireMagic;
  w.version = kViewWireVersion;
  w.image_size = static_cast<uint16_t>(std::clamp(v.image_size, 0, 65535));
  w.crop = static_cast<uint8_t>(v.crop);
  w.flags = static_cast<uint8_t>((v.flip ? 1 : 0) | (v.normalize ? 2 : 0));
  w.dtype = static_cast<uint8_t>(v.dtype);
  w.layout = static_cast<uint8_t>(v.layout);
  w.mean_count = static_cast<uint8_t>(v.mean_count);
  w.std_count = static_cast<uint8_t>(v.std_count);
  w.draw = v.draw;
  w.crop_scale_min = v.crop_scale_min;
  w.crop_scale_max = v.crop_scale_max;
  for (int c = 0; c < 3; ++c) {
    w.mean[c] = v.mean[c];
    w.std[c] = v.std[c];
  }
  return w;
}

Result<View> DecodeView(const ViewWire& w) {
  if (w.magic != kViewWireMagic || w.version != kViewWireVersion)
    return InvalidArgumentError("view message: magic {:#x} version {}, expected {:#x} version {} "
                                "(a consumer of another Batchcast version?)", w.magic, w.version,
                                kViewWireMagic, kViewWireVersion);
  const bool reserved_zero =
      std::all_of(std::begin(w.reserved), std::end(w.reserved), [](uint8_t b) { return b == 0; }) &&
      w.reserved0[0] == 0 && w.reserved0[1] == 0;
  if (!reserved_zero || w.flags > 3 || w.crop > 2 || w.dtype > 1 || w.layout > 1 ||
      w.mean_count > 3 || w.std_count > 3)
    return InvalidArgumentError("view message: unknown field values (crop {}, flags {}, dtype {}, "
                                "layout {}, or reserved bytes set): a damaged message or a newer "
                                "Batchcast", w.crop, w.flags, w.dtype, w.layout);
  View v;
  v.image_size = w.image_size;
  v.crop = static_cast<ViewCrop>(w.crop);
  v.flip = (w.flags & 1) != 0;
  v.normalize = (w.flags & 2) != 0;
  v.dtype = static_cast<ViewDType>(w.dtype);
  v.layout = static_cast<ViewLayout>(w.layout);
  v.mean_count = w.mean_count;
  v.std_count = w.std_count;
  v.draw = w.draw;
  v.crop_scale_min = w.crop_scale_min;
  v.crop_scale_max = w.crop_scale_max;
  for (int c = 0; c < 3; ++c) {
    v.mean[c] = w.mean[c];
    v.std[c] = w.std[c];
  }
  BC_RETURN_IF_ERROR(ValidateView(v).WithContext("view message"));
  const ViewWire canonical = EncodeView(v);
  if (std::memcmp(&canonical, &w, sizeof(w)) != 0)
    return InvalidArgumentError("view message: not in canonical form ({}): a damaged message",
                                ViewToString(v));
  return v;
}

uint64_t ViewKey(const View& view) {
  const ViewWire w = EncodeView(view);
  uint64_t words[sizeof(w) / 8];
  std::memcpy(words, &w, sizeof(w));
  uint64_t h = 0x5b1e1d7a11ce5eedULL;
  for (uint64_t x : words) h = HashCombine(h, x);
  return h;
}

uint64_t ViewDrawKey(const View& view) {
  if (view.draw != kAutoDraw) return view.draw;
  View rest = view;
  rest.draw = kLeaderDraw;
  // Above every named draw, so an automatic draw is never a named one.
  return (ViewKey(rest) | (uint64_t(1) << 63));
}

uint64_t ViewDrawSeed(uint64_t seed, const View& view) {
  const uint64_t draw = ViewDrawKey(view);
  return draw == kLeaderDraw ? seed : HashCombine(seed, draw);
}

}  // namespace batchcast::core
