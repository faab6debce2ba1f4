// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/view_groups.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/errors.h"
#include "core/log.h"
#include "core/option_scope.h"
#include "transport/shm/control.h"

namespace batchcast::producer {
namespace {

static_assert(shm::kMaxViewGroups <= 32, "a group mask is 32 bits");
static_assert(int(shm::kMaxViewGroups) <= pipeline::kMaxBatchGroups,
              "a batch fills every view group at once");

uint64_t Align64(uint64_t v) { return (v + 63) / 64 * 64; }

std::string Describe(const pipeline::SampleLayout& l) {
  return fmt::format("{}x{}x{} {} {}", l.channels, l.height, l.width,
                     l.dtype == pipeline::DType::kFloat32 ? "float32" : "uint8",
                     l.layout == pipeline::Layout::kHWC ? "hwc" : "chw");
}

}  // namespace

ViewGroups::ViewGroups(const ViewGroupsConfig& config, BatchSource* source)
    : config_(config), source_(source), groups_(shm::kMaxViewGroups) {
  if (source_ != nullptr && source_->own_view() != nullptr) own_ = *source_->own_view();
  else source_ = nullptr;
  own_key_ = core::ViewKey(own_);
  groups_[0].used = true;
  groups_[0].view = core::CanonicalView(own_);
  groups_[0].key = own_key_;
  groups_[0].canonical = core::ViewToString(own_);
  groups_[0].source_view = 0;
}

void ViewGroups::RefuseViews(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  refused_ = why;
}

int ViewGroups::groups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(std::count_if(groups_.begin(), groups_.end(),
                                        [](const Group& g) { return g.used; }));
}

void ViewGroups::FillStatus(shm::StreamStatus* st) const {
  std::lock_guard<std::mutex> lock(mu_);
  st->views_max = static_cast<uint32_t>(config_.views_max);
  st->view_room_bytes = config_.room_bytes;
  st->view_room_used_bytes = config_.room_bytes - FreeRoomLocked();
  st->view_groups = 0;
  for (uint32_t g = 0; g < groups_.size() && g < shm::kMaxStatusGroups; ++g) {
    if (!groups_[g].used) continue;
    shm::GroupStatus& out = st->groups[st->view_groups++];
    out.group = g;
    out.view_key = groups_[g].key;
    out.slot_bytes = groups_[g].bytes;
    // Its size now: a scheduled view's at the epoch being made (the leader's: its own).
    out.image_size = g == 0 ? 0u : static_cast<uint32_t>(SizedLocked(groups_[g], epoch_).first);
    std::snprintf(out.view, sizeof(out.view), "%s", groups_[g].canonical.c_str());
  }
}

std::string ViewGroups::ViewOfKey(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (key == own_key_) return groups_[0].canonical;
  for (size_t i = 0; i < named_.size(); ++i)
    if (named_[i] == key) return names_[i];
  return "";
}

Result<shm::ViewGroupAnswer> ViewGroups::Admit(const std::string& spec, uint32_t in_use) {
  if (spec.empty()) return shm::ViewGroupAnswer{0, own_key_, ""};
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& own_only = !refused_.empty() ? refused_ : config_.own_view_only;
  if (source_ == nullptr || !own_only.empty())
    return FailedPreconditionError("view '{}': the {} makes its own view only ({}); attach "
                                   "without a view", spec, config_.who,
                                   own_only.empty() ? "its batches come from elsewhere"
                                                    : own_only);
  auto parsed = schedule::ParseScheduledView(spec, own_);
  if (!parsed.ok())
    return parsed.status().WithContext(fmt::format("view '{}' over the {}'s {}", spec,
                                                   config_.who, groups_[0].canonical));
  schedule::ScheduledView view = *parsed;
  view.view = core::CanonicalView(view.view);
  if (view.schedule.empty() && view.view == groups_[0].view)
    return shm::ViewGroupAnswer{0, own_key_, groups_[0].canonical};
  const std::string canonical = schedule::ScheduledViewToString(view);
  const uint64_t key = schedule::ScheduledViewKey(view);
  if (!view.schedule.empty() && config_.epochs > 0 &&
      view.schedule.steps.back().first_epoch >= config_.epochs)
    return InvalidArgumentError(
        "view {}: its size {} from epoch {} is never made: the {} runs {} epochs (0..{}); give "
        "steps within the run, or start the {} with more epochs", canonical,
        view.schedule.steps.back().size, view.schedule.steps.back().first_epoch, config_.who,
        config_.epochs, config_.epochs - 1, config_.who);
  for (uint32_t g = 1; g < groups_.size(); ++g) {  // gone groups give their room back
    if (groups_[g].used && (in_use & (1u << g)) == 0) {
      BC_LOG(Info, Node, "{}: view group {} ({}) has no consumer left; its room is free",
             config_.who, g, groups_[g].canonical);
      groups_[g].used = false;
    }
  }
  for (uint32_t g = 1; g < groups_.size(); ++g)
    if (groups_[g].used && groups_[g].key == key && groups_[g].canonical == canonical)
      return shm::ViewGroupAnswer{g, groups_[g].key, groups_[g].canonical};
  return NewGroupLocked(view, canonical, key, spec);
}

Result<shm::ViewGroupAnswer> ViewGroups::NewGroupLocked(const schedule::ScheduledView& scheduled,
                                                        const std::string& canonical,
                                                        uint64_t key, const std::string& spec) {
  const core::View& view = scheduled.view;
  std::string in_use;
  int used = 0;
  for (const Group& g : groups_) {
    if (!g.used) continue;
    used += 1;
    in_use += (in_use.empty() ? "" : ", ") + g.canonical;
  }
  if (config_.views_max <= 1)
    return FailedPreconditionError(
        "view {} is not the {}'s own ({}), and it serves its own view only (views_max=1); start "
        "it with views_max=N (N: the distinct views of its consumers, its own included), or "
        "attach without a view", canonical, config_.who, groups_[0].canonical);
  if (used >= config_.views_max)
    return ResourceExhaustedError(
        "view {} would be view group {} of the {}, over views_max={} (in use: {}); start it "
        "with a larger views_max, or take one of the views it serves", canonical, used + 1,
        config_.who, config_.views_max, in_use);
  const uint64_t view_key = core::ViewKey(view);  // the view the source makes
  const bool known = std::find(made_.begin(), made_.end(), view_key) != made_.end();
  if (!known && made_.size() + 1 >= size_t(pipeline::kMaxViews))
    return ResourceExhaustedError(
        "view {}: the {} has made {} distinct views since it started (its own included), the "
        "most one leader makes (views are never forgotten); take one of the views it made, or "
        "start a new leader", canonical, config_.who, made_.size() + 1);
  auto sample = source_->CheckView(view);
  if (!sample.ok()) return sample.status().WithContext(fmt::format("view '{}'", spec));
  // A schedule's sizes, each checked (the pipeline makes each from one view); its region
  // holds the largest.
  std::vector<std::pair<int, pipeline::SampleLayout>> sized;
  pipeline::SampleLayout largest = *sample;
  for (int size : scheduled.schedule.Sizes()) {
    core::View at = view;
    at.image_size = size;
    auto l = source_->CheckView(at);
    if (!l.ok())
      return l.status().WithContext(fmt::format("view '{}' at its scheduled size {}", spec, size));
    sized.emplace_back(size, *l);
    if (l->bytes() > largest.bytes()) largest = *l;
  }
  const uint64_t bytes = Align64(config_.capacity_samples * largest.bytes());
  uint64_t offset = 0;
  if (!FindRoomLocked(bytes, &offset)) {
    const uint64_t taken = config_.room_bytes - FreeRoomLocked();
    return ResourceExhaustedError(
        "view {} needs {} bytes per slot ({} images of {}{}); {} of {} are left (in pieces "
        "between the other groups'); start the {} with view_bytes={}", canonical, bytes,
        config_.capacity_samples, Describe(largest),
        sized.empty() ? "" : ", its largest scheduled size", FreeRoomLocked(),
        config_.room_option, config_.who, SizeOptionValue(double(taken + bytes)));
  }
  uint32_t g = 1;
  while (groups_[g].used) ++g;  // used < views_max <= kMaxViewGroups: one is free
  Group& group = groups_[g];
  group = Group{};
  group.used = true;
  group.view = view;
  group.schedule = scheduled.schedule;
  group.sized = std::move(sized);
  group.key = key;
  if (!known) made_.push_back(view_key);
  if (std::find(named_.begin(), named_.end(), key) == named_.end()) {
    named_.push_back(key);
    names_.push_back(canonical);
  }
  group.canonical = canonical;
  group.sample = *sample;
  group.offset = offset;
  group.bytes = bytes;
  BC_LOG(Info, Node, "{}: view group {}: {} ({} per image{}, {} bytes per slot at {})",
         config_.who, g, canonical, Describe(largest), group.sized.empty() ? "" : " at most",
         bytes, offset);
  return shm::ViewGroupAnswer{g, group.key, canonical};
}

bool ViewGroups::FindRoomLocked(uint64_t bytes, uint64_t* offset) const {
  std::vector<std::pair<uint64_t, uint64_t>> taken;  // [begin, end) of the groups' regions
  for (size_t g = 1; g < groups_.size(); ++g)
    if (groups_[g].used)
      taken.emplace_back(groups_[g].offset, groups_[g].offset + groups_[g].bytes);
  std::sort(taken.begin(), taken.end());
  uint64_t at = config_.room_offset;
  const uint64_t end = config_.room_offset + config_.room_bytes;
  for (const auto& [begin, stop] : taken) {
    if (begin >= at && begin - at >= bytes) break;
    at = std::max(at, stop);
  }
  if (at > end || end - at < bytes) return false;
  *offset = at;
  return true;
}

uint64_t ViewGroups::FreeRoomLocked() const {
  uint64_t taken = 0;
  for (size_t g = 1; g < groups_.size(); ++g)
    if (groups_[g].used) taken += groups_[g].bytes;
  return config_.room_bytes - std::min(taken, config_.room_bytes);
}

std::pair<int, pipeline::SampleLayout> ViewGroups::SizedLocked(const Group& g,
                                                               uint64_t epoch) const {
  if (g.schedule.empty()) return {g.view.image_size, g.sample};
  const int size = g.schedule.SizeAt(epoch);
  for (const auto& s : g.sized)
    if (s.first == size) return s;
  return {g.view.image_size, g.sample};  // not reached: sized holds every scheduled size
}

Result<std::vector<GroupRegion>> ViewGroups::RegionsFor(
    const std::vector<shm::MemberInfo>& receivers, uint64_t only,
    const pipeline::SampleLayout& leader_sample, uint64_t epoch) {
  uint32_t want = 0;
  for (const shm::MemberInfo& m : receivers)
    if ((only & shm::RingLeader::MemberBit(m.id)) != 0 && m.group < groups_.size())
      want |= 1u << m.group;
  std::vector<GroupRegion> regions;
  if ((want & ~1u) == 0) return regions;  // the leader's view alone
  std::lock_guard<std::mutex> lock(mu_);
  epoch_ = epoch;
  for (uint32_t g = 0; g < groups_.size(); ++g) {
    if ((want & (1u << g)) == 0) continue;
    Group& group = groups_[g];
    if (g == 0) {
      regions.push_back({0, own_key_, 0, 0, leader_sample});
      continue;
    }
    if (!group.used)  // a receiver's group is freed only once no member is in it
      return InternalError("{}: a receiver is in view group {}, which is free (producer bug)",
                           config_.who, g);
    if (group.source_view < 0) {
      auto id = source_->AddView(group.view);
      if (!id.ok()) return id.status().WithContext(config_.who);
      group.source_view = *id;
    }
    // A scheduled view: this epoch's size, by the pipeline's per-batch size override.
    const auto [size, sample] = SizedLocked(group, epoch);
    regions.push_back({g, group.key, group.source_view, group.offset, sample,
                       group.schedule.empty() ? 0 : size});
  }
  return regions;
}

}  // namespace batchcast::producer
