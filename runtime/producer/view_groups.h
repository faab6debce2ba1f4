// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The view groups of one producer (docs/pipeline.md "Views through the Producer"). A consumer
// may join with a view of its own (Options::view, a spec over the leader's view); consumers
// with equal views form a group. This table, shared by the ring's control thread (joins) and
// the producer thread (fills), says
//   - at a join: the joiner's group, or why it is refused (views_max, the slots' image room
//     view_bytes, a view the dataset cannot give, a producer that makes one view only);
//   - at a fill: the groups the position's receivers belong to, each with its image region
//     in the slot, so that one decode per sample makes exactly the groups someone receives.
// Group 0 is the leader's own view, at the front of the slot as without views. Group g > 0
// holds one region of the slots' view room (capacity_samples images at its view's size);
// a group whose last member is gone (its entry freed: no member of it holds a slot) gives
// its index and region back at the next join.
// A view may carry its own schedule of sizes by stream epoch (schedule/view_schedule.h,
// `view(resize=96@0:160@2:224@4)`): its region holds its largest size, and the batches of
// each epoch are made at that epoch's size (one pipeline view, a per-batch size).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "batchcast/status.h"
#include "core/view.h"
#include "producer/batch_source.h"
#include "producer/slot_fill.h"
#include "schedule/view_schedule.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::producer {

struct ViewGroupsConfig {
  std::string who;                 // prefix of messages ("leader", "service", ...)
  int views_max = 1;               // groups, the leader's own included
  uint64_t capacity_samples = 0;   // images a region holds (the slot's positions)
  uint64_t room_offset = 0;        // the slots' view room (SlotLayout::views_offset)
  uint64_t room_bytes = 0;
  std::string room_option;         // how the room was set, for refusals ("view_bytes=64m")
  uint64_t epochs = 0;             // the run's epochs, for view schedules (0: until stopped)
  // Non-empty: why this producer serves its own view only (a refusal's cause).
  std::string own_view_only;
};

class ViewGroups {
 public:
  // `source` makes the groups' images (BatchSource::own_view non-null), or is null when
  // config.own_view_only says why there are none.
  ViewGroups(const ViewGroupsConfig& config, BatchSource* source);

  // The control thread: the group of a joiner asking for `spec` ("" = the leader's view),
  // `in_use` the groups of the ring's members (shm::ViewAdmitter). Groups not in `in_use`
  // are freed first.
  Result<shm::ViewGroupAnswer> Admit(const std::string& spec, uint32_t in_use);
  // From now on a join with a view other than the leader's is refused with `why` (the GPU
  // data plane stages the leader's view only).
  void RefuseViews(const std::string& why);

  // The producer thread: the regions of the groups of the receivers in `only` in a batch of
  // stream epoch `epoch` (the leader's view at `leader_sample`; a scheduled view at its size
  // for `epoch`). Empty when they all take the leader's view: the slot is filled as without
  // views. Adds a group's view to the source at its first fill.
  Result<std::vector<GroupRegion>> RegionsFor(const std::vector<shm::MemberInfo>& receivers,
                                              uint64_t only,
                                              const pipeline::SampleLayout& leader_sample,
                                              uint64_t epoch);

  // Groups in use now (the leader's included), for logs and telemetry.
  int groups() const;
  // The groups served now, views_max and the view room, into a status reply
  // (`batchcast status`).
  void FillStatus(shm::StreamStatus* st) const;
  // The canonical spec of the view with key `key` given to a group since the start ("" if
  // none), for telemetry.
  std::string ViewOfKey(uint64_t key) const;

 private:
  struct Group {
    bool used = false;
    core::View view;                  // with a schedule: at its largest size
    schedule::ViewSchedule schedule;  // empty: a fixed view
    uint64_t key = 0;
    std::string canonical;
    pipeline::SampleLayout sample;    // at view.image_size
    std::vector<std::pair<int, pipeline::SampleLayout>> sized;  // with a schedule: per size
    uint64_t offset = 0, bytes = 0;  // its region of every slot
    int source_view = -1;            // BatchSource::AddView's id (-1: not added yet)
  };
  // A free piece of the view room of `bytes` (first fit), or false.
  bool FindRoomLocked(uint64_t bytes, uint64_t* offset) const;
  uint64_t FreeRoomLocked() const;
  Result<shm::ViewGroupAnswer> NewGroupLocked(const schedule::ScheduledView& view,
                                              const std::string& canonical, uint64_t key,
                                              const std::string& spec);
  // The size and layout of group g's images in a batch of `epoch`.
  std::pair<int, pipeline::SampleLayout> SizedLocked(const Group& g, uint64_t epoch) const;

  ViewGroupsConfig config_;
  BatchSource* source_;
  core::View own_;  // the leader's view (group 0)
  uint64_t own_key_ = 0;
  mutable std::mutex mu_;
  std::string refused_;  // RefuseViews (under mu_)
  std::vector<Group> groups_;  // kMaxViewGroups entries; [0]: the leader's
  std::vector<uint64_t> made_;  // core::ViewKey of the views given to groups > 0 since the start
  std::vector<uint64_t> named_;  // the group keys given since the start (ScheduledViewKey)
  std::vector<std::string> names_;  // their canonical specs, in named_'s order
  uint64_t epoch_ = 0;  // of the latest batch made for view groups (status: current sizes)
};

}  // namespace batchcast::producer
