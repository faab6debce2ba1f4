// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "schedule/view_schedule.h"

#include <algorithm>
#include <charconv>

#include "core/errors.h"
#include "core/random.h"

namespace batchcast::schedule {
namespace {

bool StepSpace(char c) { return c == ' ' || c == '\t'; }

std::string_view StepTrim(std::string_view s) {
  while (!s.empty() && StepSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && StepSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string AtColumn(size_t index) { return fmt::format(" at column {}", index + 1); }

template <typename T>
bool StepInt(std::string_view s, T* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

int ViewSchedule::SizeAt(uint64_t epoch) const {
  int size = 0;
  for (const ViewStep& s : steps)
    if (s.first_epoch <= epoch) size = s.size;
  return size;
}

int ViewSchedule::MaxSize() const {
  int size = 0;
  for (const ViewStep& s : steps) size = std::max(size, s.size);
  return size;
}

std::vector<int> ViewSchedule::Sizes() const {
  std::vector<int> sizes;
  for (const ViewStep& s : steps) sizes.push_back(s.size);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

std::string ViewSchedule::ToString() const {
  std::string s;
  for (const ViewStep& step : steps)
    s += fmt::format("{}{}@{}", s.empty() ? "" : ":", step.size, step.first_epoch);
  return s;
}

Result<ViewSchedule> ParseViewSchedule(std::string_view value, size_t column) {
  auto bad = [](std::string_view what, size_t at) {
    return InvalidArgumentError("view spec: 'resize': {}{} (write sizes by epoch, e.g. "
                                "resize=96@0:160@2:224@4, or one per epoch: resize=96:128:224)",
                                what, AtColumn(at));
  };
  if (value.find('(') != std::string_view::npos || value.find('=') != std::string_view::npos)
    return InvalidArgumentError(
        "view spec: 'resize' of a view is its image size by epoch (resize=96@0:160@2:224@4), "
        "not a leader's resize(...) schedule{}: that one moves samples between sizes within an "
        "epoch and scales batch sizes and learning rates per size, and every view group shares "
        "the leader's producer batches, so a view cannot follow it. Give the view its sizes by "
        "epoch, or run that schedule as the leader's own option 'resize'", AtColumn(column));
  ViewSchedule out;
  uint64_t next_epoch = 0;
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t stop = value.find(':', pos);
    if (stop == std::string_view::npos) stop = value.size();
    const std::string_view item = StepTrim(value.substr(pos, stop - pos));
    const size_t at = column + pos;
    if (item.empty()) return bad("an empty step", at);
    if (int(out.steps.size()) >= kMaxViewSteps)
      return bad(fmt::format("more than {} steps", kMaxViewSteps), at);
    const size_t sign = item.find('@');
    ViewStep step;
    const std::string_view size = StepTrim(item.substr(0, sign));
    if (!StepInt(size, &step.size) || step.size < 1 || step.size > core::kMaxViewImageSize)
      return bad(fmt::format("size '{}' is not an integer in [1, {}]", size,
                             core::kMaxViewImageSize), at);
    step.first_epoch = next_epoch;
    if (sign != std::string_view::npos) {
      const std::string_view epoch = StepTrim(item.substr(sign + 1));
      if (!StepInt(epoch, &step.first_epoch) || step.first_epoch >= kMaxViewEpoch)
        return bad(fmt::format("epoch '{}' is not an integer in [0, {}]", epoch,
                               kMaxViewEpoch - 1), at);
      if (out.steps.empty() && step.first_epoch != 0)
        return bad(fmt::format("the first size starts at epoch 0 (the size before epoch {} "
                               "would be unknown), got {}@{}", step.first_epoch, step.size,
                               step.first_epoch), at);
      if (!out.steps.empty() && step.first_epoch < next_epoch)
        return bad(fmt::format("epochs must be strictly ascending, but {}@{} follows {}@{}",
                               step.size, step.first_epoch, out.steps.back().size,
                               out.steps.back().first_epoch), at);
    }
    if (step.first_epoch >= kMaxViewEpoch)  // an implicit step after the last epoch allowed
      return bad(fmt::format("size {} would start at epoch {}, past the last one a step may "
                             "start at ({})", step.size, step.first_epoch, kMaxViewEpoch - 1), at);
    if (out.steps.empty() || out.steps.back().size != step.size) out.steps.push_back(step);
    next_epoch = step.first_epoch + 1;
    pos = stop + 1;
  }
  return out;
}

core::View ScheduledView::At(uint64_t epoch) const {
  core::View v = view;
  if (!schedule.empty()) v.image_size = schedule.SizeAt(epoch);
  return v;
}

Result<ScheduledView> ParseScheduledView(std::string_view text, const core::View& base) {
  std::string rest(text);
  ScheduledView out;
  const core::ViewSpecItem* resize = nullptr;
  const core::ViewSpecItem* size = nullptr;
  // The items as core::ParseView splits them. A wrapper it refuses is refused first: its
  // message's column is the text's (the stand-in below may shorten the spec's end).
  const core::ViewSpecItems split = core::SplitViewSpec(text);
  BC_RETURN_IF_ERROR(split.wrapper);
  for (const core::ViewSpecItem& it : split.items) {
    if (it.key == "resize" && resize != nullptr)
      return InvalidArgumentError("view spec: duplicate key 'resize'{}", AtColumn(it.begin));
    if (it.key == "resize") resize = &it;
    if (it.key == "size") size = &it;
  }
  if (resize != nullptr) {
    if (size != nullptr)
      return InvalidArgumentError(
          "view spec: 'size'{} and 'resize'{} both given: a view with a schedule takes its "
          "size from it (each epoch's, the largest sizing its room); give one of them",
          AtColumn(size->begin), AtColumn(resize->begin));
    BC_ASSIGN_OR_RETURN(out.schedule, ParseViewSchedule(resize->value, resize->value_begin));
    // core::ParseView reads the rest, with `size=<largest>` in the item's place (padded, so
    // that its messages keep their columns): the view a pipeline makes at each epoch's size.
    std::string stand_in = fmt::format("size={}", out.schedule.MaxSize());
    stand_in.resize(resize->end - resize->begin, ' ');
    rest.replace(resize->begin, resize->end - resize->begin, stand_in);
  }
  BC_ASSIGN_OR_RETURN(out.view, core::ParseView(rest, base));
  if (out.schedule.steps.size() == 1) out.schedule.steps.clear();  // one size: a fixed view
  return out;
}

std::string ScheduledViewToString(const ScheduledView& v) {
  const std::string fixed = core::ViewToString(v.view);
  if (v.schedule.empty()) return fixed;
  const std::string head = fmt::format("view(size={}", core::CanonicalView(v.view).image_size);
  return fmt::format("view(resize={}{}", v.schedule.ToString(), fixed.substr(head.size()));
}

uint64_t ScheduledViewKey(const ScheduledView& v) {
  uint64_t key = core::ViewKey(v.view);
  if (v.schedule.empty()) return key;
  key = HashCombine(key, 0x7669657773636864ULL);  // "viewschd": never a fixed view's key
  for (const ViewStep& s : v.schedule.steps) key = HashCombine(key, s.first_epoch, uint64_t(s.size));
  return key;
}

}  // namespace batchcast::schedule
