// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A view's own progressive-resizing schedule (docs/progressive-resizing.md, "A schedule per
// view"): the image size of a consumer's view group per epoch of the stream, so that trials
// on different schedules share one leader and one decode per sample.
//
//   view(resize=96@0:160@2:224@4,crop=random,flip=1)   96 px from epoch 0, 160 from 2, 224 from 4
//   view(resize=96:128:160:224)                        one size per epoch: 96 at 0, 128 at 1, ...
//
// An item `S@E` starts size S at stream epoch E; an item `S` starts one epoch after the item
// before it (the first at epoch 0). The last size holds to the end of the run. Sizes change at
// epoch boundaries only, and a view's batch size never changes: all view groups share the
// leader's producer batches, so a view's schedule is its size per epoch alone (the leader's
// own resize(...) schedule also moves samples between sizes and scales batch sizes and LR;
// a view refuses that form with the cause).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/status.h"
#include "core/view.h"

namespace batchcast::schedule {

inline constexpr int kMaxViewSteps = 64;
inline constexpr uint64_t kMaxViewEpoch = uint64_t(1) << 32;  // steps start before this epoch

struct ViewStep {
  uint64_t first_epoch = 0;
  int size = 0;
  bool operator==(const ViewStep& o) const {
    return first_epoch == o.first_epoch && size == o.size;
  }
};

// Sizes by epoch. Canonical: the first step at epoch 0, epochs strictly ascending,
// consecutive sizes distinct, at least two steps (one size is a fixed view: no schedule).
struct ViewSchedule {
  std::vector<ViewStep> steps;  // empty: a fixed view

  bool empty() const { return steps.empty(); }
  // The size at stream epoch `epoch` (0 without steps).
  int SizeAt(uint64_t epoch) const;
  int MaxSize() const;
  // The distinct sizes, ascending.
  std::vector<int> Sizes() const;
  // "96@0:160@2:224@4" (the canonical steps).
  std::string ToString() const;
  bool operator==(const ViewSchedule& o) const { return steps == o.steps; }
};

// Parses the value of a view spec's `resize` key. `column`: the 0-based column of the value
// in the spec, for messages ("view spec: 'resize': ... at column N").
[[nodiscard]] Result<ViewSchedule> ParseViewSchedule(std::string_view value, size_t column);

// A consumer's view with its schedule. With a schedule, view.image_size is the schedule's
// largest size: the view a pipeline is given (its draws, core::ViewDrawSeed), made at each
// epoch's size by a per-batch size override.
struct ScheduledView {
  core::View view;
  ViewSchedule schedule;
  // The view as made at stream epoch `epoch` (its size that epoch's).
  core::View At(uint64_t epoch) const;
};

// core::ParseView's syntax and rules over `base`, plus the key `resize` (above). `size` and
// `resize` together are refused; so is a leader's resize(...) spec as the value.
[[nodiscard]] Result<ScheduledView> ParseScheduledView(std::string_view text,
                                                       const core::View& base);

// The canonical spec: core::ViewToString without a schedule; with one, `resize=<steps>` in
// place of `size=` ("view(resize=96@0:224@2,crop=random,...)"). Reads back to the same value.
std::string ScheduledViewToString(const ScheduledView& v);

// The view's key: core::ViewKey without a schedule, else a key of the view and its steps.
uint64_t ScheduledViewKey(const ScheduledView& v);

}  // namespace batchcast::schedule
