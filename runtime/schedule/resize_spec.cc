// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "schedule/resize_spec.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>

#include "core/errors.h"
#include "core/suggest.h"
#include "schedule/upgrade_policy.h"

namespace batchcast::schedule {
namespace {

constexpr std::array<std::string_view, 10> kKeys = {
    "min", "max", "step", "sizes", "upgrade", "mode", "lr", "max_batch", "final_epochs", "policy"};

// Says where a piece of text came from; the argument is an offset inside the value.
using Locator = std::function<std::string(size_t)>;

// " (did you mean 'x'?)" for the closest candidate within distance 3, or "".
template <typename Range>
std::string Suggest(std::string_view word, const Range& candidates, std::string_view prefix = "") {
  std::string_view best;
  size_t best_d = 4;
  for (std::string_view c : candidates) {
    size_t d = EditDistance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  if (best.empty()) return "";
  return fmt::format(" (did you mean '{}{}'?)", prefix, best);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Leading whitespace count, so positions inside a trimmed value stay exact.
size_t LeadingSpace(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && std::isspace(static_cast<unsigned char>(s[n]))) ++n;
  return n;
}

template <typename T>
Status ParseInt(std::string_view text, std::string_view key, const Locator& at, T* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size())
    return InvalidArgumentError("resize spec: '{}' is not an integer for key '{}'{}", text, key,
                                at(0));
  return Status::Ok();
}

Status ParseUpgrade(std::string_view text, const Locator& at, double* out) {
  std::string s(text);
  bool percent = !s.empty() && s.back() == '%';
  if (percent) s.pop_back();
  char* end = nullptr;
  double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    return InvalidArgumentError("resize spec: '{}' is not a number for key 'upgrade'{}", text,
                                at(0));
  if (percent) v /= 100.0;
  if (!(v > 0.0 && v <= 1.0))
    return InvalidArgumentError("resize spec: upgrade must be in (0, 1], got {}{}", text, at(0));
  *out = v;
  return Status::Ok();
}

Status ParseSizes(std::string_view text, const Locator& at, std::vector<int>* out) {
  out->clear();
  size_t pos = 0;
  while (true) {
    size_t colon = text.find(':', pos);
    std::string_view item = text.substr(pos, colon == std::string_view::npos ? colon : colon - pos);
    int v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size())
      return InvalidArgumentError("resize spec: '{}' in 'sizes' is not an integer{}", item,
                                  at(pos));
    if (v <= 0 || v > kMaxResizeImageSize)
      return InvalidArgumentError("resize spec: size {} in 'sizes' must be in [1, {}]{}", v,
                                  kMaxResizeImageSize, at(pos));
    if (!out->empty() && v <= out->back())
      return InvalidArgumentError(
          "resize spec: 'sizes' must be strictly ascending, but {} follows {}{}", v, out->back(),
          at(pos));
    out->push_back(v);
    if (colon == std::string_view::npos) break;
    pos = colon + 1;
  }
  return Status::Ok();
}

template <typename E, size_t N>
Status ParseEnum(std::string_view text, std::string_view key,
                 const std::array<std::pair<std::string_view, E>, N>& names, const Locator& at,
                 E* out) {
  std::vector<std::string_view> choices;
  for (const auto& [name, value] : names) {
    if (text == name) {
      *out = value;
      return Status::Ok();
    }
    choices.push_back(name);
  }
  std::string list;
  for (auto c : choices) list += (list.empty() ? "" : "|") + std::string(c);
  return InvalidArgumentError("resize spec: key '{}' must be {}, got '{}'{}{}", key, list, text,
                              at(0), Suggest(text, choices));
}

constexpr std::array<std::pair<std::string_view, ResizeMode>, 2> kModes = {
    {{"mixed", ResizeMode::kMixed}, {"exhaustive", ResizeMode::kExhaustive}}};
constexpr std::array<std::pair<std::string_view, LrRule>, 3> kLrRules = {
    {{"linear", LrRule::kLinear}, {"sqrt", LrRule::kSqrt}, {"none", LrRule::kNone}}};

// Sets one key of `spec` from its text value (already trimmed).
Status SetKey(std::string_view key, std::string_view value, const Locator& at, ResizeSpec* spec) {
  if (value.empty())
    return InvalidArgumentError("resize spec: empty value for key '{}'{}", key, at(0));
  auto positive = [&](int v) -> Status {
    if (v <= 0 || v > kMaxResizeImageSize)
      return InvalidArgumentError("resize spec: {} must be in [1, {}], got {}{}", key,
                                  kMaxResizeImageSize, v, at(0));
    return Status::Ok();
  };
  if (key == "min" || key == "max" || key == "step") {
    int v = 0;
    BC_RETURN_IF_ERROR(ParseInt(value, key, at, &v));
    BC_RETURN_IF_ERROR(positive(v));
    (key == "min" ? spec->min_size : key == "max" ? spec->max_size : spec->step) = v;
    return Status::Ok();
  }
  if (key == "sizes") return ParseSizes(value, at, &spec->sizes);
  if (key == "upgrade") return ParseUpgrade(value, at, &spec->upgrade);
  if (key == "mode") return ParseEnum(value, key, kModes, at, &spec->mode);
  if (key == "lr") return ParseEnum(value, key, kLrRules, at, &spec->lr);
  if (key == "max_batch") {
    BC_RETURN_IF_ERROR(ParseInt(value, key, at, &spec->max_batch));
    if (spec->max_batch < 0)
      return InvalidArgumentError("resize spec: max_batch must be >= 0 (0 = no cap), got {}{}",
                                  value, at(0));
    return Status::Ok();
  }
  if (key == "final_epochs") {
    BC_RETURN_IF_ERROR(ParseInt(value, key, at, &spec->final_epochs));
    if (spec->final_epochs < 0)
      return InvalidArgumentError("resize spec: final_epochs must be >= 0, got {}{}", value, at(0));
    return Status::Ok();
  }
  if (key == "policy") {
    if (!IsKnownUpgradePolicy(value))
      return InvalidArgumentError("resize spec: unknown policy '{}'{} (known: {}){}", value, at(0),
                                  KnownUpgradePolicies(), Suggest(value, UpgradePolicyNames()));
    spec->policy = std::string(value);
    return Status::Ok();
  }
  return InternalError("resize spec: key '{}' has no setter", key);
}

bool IsKey(std::string_view key) {
  return std::find(kKeys.begin(), kKeys.end(), key) != kKeys.end();
}

std::string Column(size_t index) { return fmt::format(" at column {}", index + 1); }

// Skips whitespace from `*pos`.
void SkipSpace(std::string_view text, size_t* pos) {
  while (*pos < text.size() && std::isspace(static_cast<unsigned char>(text[*pos]))) ++(*pos);
}

// Parses the "key=value,..." body between the parentheses; `*pos` starts after '('.
Status ParseBody(std::string_view text, size_t* pos, ResizeSpec* spec,
                 std::set<std::string>* seen) {
  SkipSpace(text, pos);
  if (*pos < text.size() && text[*pos] == ')') {
    ++(*pos);
    return Status::Ok();
  }
  while (true) {
    SkipSpace(text, pos);
    size_t key_begin = *pos;
    while (*pos < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[*pos])) || text[*pos] == '_'))
      ++(*pos);
    std::string_view key = text.substr(key_begin, *pos - key_begin);
    if (key.empty()) {
      if (*pos >= text.size())
        return InvalidArgumentError("resize spec: expected a key at column {} (end of spec)",
                                    *pos + 1);
      return InvalidArgumentError("resize spec: expected a key at column {}, got '{}'", *pos + 1,
                                  text[*pos]);
    }
    if (!IsKey(key))
      return InvalidArgumentError("resize spec: unknown key '{}'{}{}", key, Column(key_begin),
                                  Suggest(key, kKeys));
    if (!seen->insert(std::string(key)).second)
      return InvalidArgumentError("resize spec: duplicate key '{}'{}", key, Column(key_begin));
    SkipSpace(text, pos);
    if (*pos >= text.size() || text[*pos] != '=')
      return InvalidArgumentError("resize spec: expected '=' after key '{}'{}", key, Column(*pos));
    ++(*pos);
    size_t value_begin = *pos;
    while (*pos < text.size() && text[*pos] != ',' && text[*pos] != ')') ++(*pos);
    std::string_view raw = text.substr(value_begin, *pos - value_begin);
    size_t lead = LeadingSpace(raw);
    Locator at = [value_begin, lead](size_t off) { return Column(value_begin + lead + off); };
    BC_RETURN_IF_ERROR(SetKey(key, Trim(raw), at, spec));
    if (*pos >= text.size())
      return InvalidArgumentError("resize spec: missing ')' at column {} (end of spec)", *pos + 1);
    if (text[(*pos)++] == ')') return Status::Ok();
  }
}

// Cross-key checks that need to know which keys were given.
Status CheckKeyCombination(const std::set<std::string>& seen) {
  bool has_sizes = seen.count("sizes") != 0;
  bool has_range = seen.count("min") || seen.count("max") || seen.count("step");
  if (has_sizes && has_range)
    return InvalidArgumentError("resize spec: 'sizes' cannot be combined with 'min'/'max'/'step'");
  if (!has_sizes && (!seen.count("min") || !seen.count("max")))
    return InvalidArgumentError("resize spec: needs 'min' and 'max' (or 'sizes')");
  return Status::Ok();
}

}  // namespace

const char* ResizeModeName(ResizeMode mode) {
  return mode == ResizeMode::kMixed ? "mixed" : "exhaustive";
}

const char* LrRuleName(LrRule rule) {
  switch (rule) {
    case LrRule::kLinear:
      return "linear";
    case LrRule::kSqrt:
      return "sqrt";
    case LrRule::kNone:
      return "none";
  }
  return "?";
}

Result<ResizeSpec> ParseResizeSpec(std::string_view text) {
  size_t pos = 0;
  SkipSpace(text, &pos);
  constexpr std::string_view kHead = "resize";
  if (text.substr(pos, kHead.size()) != kHead)
    return InvalidArgumentError("resize spec: expected 'resize(' at column {}, got '{}'", pos + 1,
                                text.substr(pos, 12));
  pos += kHead.size();
  SkipSpace(text, &pos);
  if (pos >= text.size() || text[pos] != '(')
    return InvalidArgumentError("resize spec: expected '(' after 'resize' at column {}", pos + 1);
  ++pos;
  ResizeSpec spec;
  std::set<std::string> seen;
  BC_RETURN_IF_ERROR(ParseBody(text, &pos, &spec, &seen));
  SkipSpace(text, &pos);
  if (pos < text.size())
    return InvalidArgumentError("resize spec: unexpected '{}' after ')' at column {}",
                                text.substr(pos), pos + 1);
  BC_RETURN_IF_ERROR(CheckKeyCombination(seen));
  BC_RETURN_IF_ERROR(ValidateResizeSpec(spec));
  return spec;
}

namespace {

struct ConfigLine {
  std::string key, value, where;
};

Result<ResizeSpec> SpecFromLines(const std::vector<ConfigLine>& lines) {
  ResizeSpec spec;
  std::set<std::string> seen;
  bool any = false;
  std::vector<std::string> prefixed;
  for (auto k : kKeys) prefixed.push_back("resize_" + std::string(k));
  // The whole-spec line first, whatever its position, so that resize_<key> lines refine it.
  for (const auto& l : lines) {
    if (l.key != "resize") continue;
    auto r = ParseResizeSpec(l.value);
    if (!r.ok()) return r.status().WithContext(l.where);
    spec = *r;
    any = true;
    seen = {"min", "max"};
    if (!spec.sizes.empty()) seen = {"sizes"};
  }
  for (const auto& l : lines) {
    if (l.key.rfind("resize_", 0) != 0) continue;
    std::string key = l.key.substr(7);
    if (!IsKey(key))
      return InvalidArgumentError("{}: unknown key '{}'{}", l.where, l.key,
                                  Suggest(l.key, prefixed));
    Locator at = [](size_t) { return std::string(); };
    BC_RETURN_IF_ERROR(SetKey(key, Trim(l.value), at, &spec).WithContext(l.where));
    // A later explicit list replaces a range and the other way round.
    if (key == "sizes") {
      seen.erase("min"), seen.erase("max"), seen.erase("step");
      spec.min_size = spec.max_size = 0;
    } else if (key == "min" || key == "max" || key == "step") {
      seen.erase("sizes");
      spec.sizes.clear();
    }
    seen.insert(key);
    any = true;
  }
  if (!any) return NotFoundError("resize spec: no 'resize' or 'resize_*' keys in the config");
  BC_RETURN_IF_ERROR(CheckKeyCombination(seen));
  BC_RETURN_IF_ERROR(ValidateResizeSpec(spec));
  return spec;
}

std::string Unquote(std::string v) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
    return v.substr(1, v.size() - 2);
  return v;
}

}  // namespace

Result<ResizeSpec> ResizeSpecFromConfig(
    const std::vector<std::pair<std::string, std::string>>& pairs, std::string_view where) {
  std::vector<ConfigLine> lines;
  for (const auto& [k, v] : pairs) {
    std::string key = k;
    std::replace(key.begin(), key.end(), '-', '_');
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    lines.push_back({key, Unquote(std::string(Trim(v))), fmt::format("{} key '{}'", where, key)});
  }
  return SpecFromLines(lines);
}

Result<ResizeSpec> ResizeSpecFromConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoError(errno, "config file '{}' cannot be opened", path);
  std::vector<ConfigLine> lines;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    // The same rules as ApplyConfigFile in runtime/core/options.cc. A '#' inside a quoted
    // spec string would be cut there too, and no resize key needs one.
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::string_view t = Trim(line);
    if (t.empty() || t.front() == '[') continue;
    size_t eq = t.find('=');
    if (eq == std::string_view::npos) continue;  // options.cc reports malformed lines
    std::string key(Trim(t.substr(0, eq)));
    std::replace(key.begin(), key.end(), '-', '_');
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    lines.push_back(
        {key, Unquote(std::string(Trim(t.substr(eq + 1)))), fmt::format("{}:{}", path, lineno)});
  }
  return SpecFromLines(lines);
}

Status ValidateResizeSpec(const ResizeSpec& s) {
  if (!s.sizes.empty()) {
    for (size_t i = 0; i < s.sizes.size(); ++i) {
      if (s.sizes[i] <= 0 || s.sizes[i] > kMaxResizeImageSize)
        return InvalidArgumentError("resize spec: size {} in 'sizes' must be in [1, {}]",
                                    s.sizes[i], kMaxResizeImageSize);
      if (i > 0 && s.sizes[i] <= s.sizes[i - 1])
        return InvalidArgumentError(
            "resize spec: 'sizes' must be strictly ascending, but {} follows {}", s.sizes[i],
            s.sizes[i - 1]);
    }
  } else {
    if (s.min_size <= 0 || s.max_size <= 0 || s.max_size > kMaxResizeImageSize)
      return InvalidArgumentError("resize spec: min and max must be in [1, {}], got {} and {}",
                                  kMaxResizeImageSize, s.min_size, s.max_size);
    if (s.min_size > s.max_size)
      return InvalidArgumentError("resize spec: min ({}) must be <= max ({})", s.min_size,
                                  s.max_size);
    if (s.step <= 0) return InvalidArgumentError("resize spec: step must be > 0, got {}", s.step);
  }
  // ceil((max - min) / step) + 1, counted before BucketSizes() would build them.
  int64_t buckets = static_cast<int64_t>(s.sizes.size());
  if (s.sizes.empty()) buckets = (int64_t{s.max_size} - s.min_size + s.step - 1) / s.step + 1;
  if (buckets > kMaxResizeBuckets)
    return InvalidArgumentError("resize spec: {} buckets, at most {} are supported (raise step)",
                                buckets, kMaxResizeBuckets);
  if (!(s.upgrade > 0.0 && s.upgrade <= 1.0))
    return InvalidArgumentError("resize spec: upgrade must be in (0, 1], got {}", s.upgrade);
  if (s.max_batch < 0)
    return InvalidArgumentError("resize spec: max_batch must be >= 0, got {}", s.max_batch);
  if (s.final_epochs < 0)
    return InvalidArgumentError("resize spec: final_epochs must be >= 0, got {}", s.final_epochs);
  if (!IsKnownUpgradePolicy(s.policy))
    return InvalidArgumentError("resize spec: unknown policy '{}' (known: {})", s.policy,
                                KnownUpgradePolicies());
  return Status::Ok();
}

std::vector<int> BucketSizes(const ResizeSpec& s) {
  if (!s.sizes.empty()) return s.sizes;
  std::vector<int> out;
  if (s.step <= 0 || s.min_size <= 0 || s.min_size > s.max_size) return out;
  for (int64_t v = s.min_size; v < s.max_size && out.size() <= kMaxResizeBuckets; v += s.step)
    out.push_back(static_cast<int>(v));
  out.push_back(s.max_size);
  return out;
}

std::string ResizeSpecToString(const ResizeSpec& s) {
  std::string head;
  if (!s.sizes.empty()) {
    for (int v : s.sizes) head += (head.empty() ? "sizes=" : ":") + std::to_string(v);
  } else {
    head = fmt::format("min={},max={},step={}", s.min_size, s.max_size, s.step);
  }
  return fmt::format("resize({},upgrade={},mode={},lr={},max_batch={},final_epochs={},policy={})",
                     head, s.upgrade, ResizeModeName(s.mode), LrRuleName(s.lr), s.max_batch,
                     s.final_epochs, s.policy);
}

}  // namespace batchcast::schedule
