// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Completing a producer batch in a ring slot, shared by every producer of the node plane
// through producer::SlotWriter: the fill-repeat tail its receivers need and the descriptor
// consumers read. One implementation, so the tail and descriptor rules
// (docs/data-plane.md) cannot drift apart between front doors.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "batchcast/status.h"
#include "pipeline/pipeline.h"
#include "producer/slot_layout.h"
#include "transport/shm/carving.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::producer {

// One view group's images in a slot (docs/pipeline.md "Views through the Producer").
struct GroupRegion {
  uint32_t group = 0;             // its index in SlotDesc::groups (0: the leader's view)
  uint64_t view_key = 0;          // core::ViewKey of its view
  int source_view = 0;            // its id at the batch source (BatchSource::AddView)
  uint64_t offset = 0;            // of its images in the slot
  pipeline::SampleLayout sample;  // of its images in this batch
  int image_size = 0;             // its size in this batch (a view's schedule; 0: the view's)
};

struct SlotContents {
  uint64_t epoch = 0;
  int64_t batch = 0;               // producer batch index within the epoch
  int64_t batches_in_epoch = 0;   // 0: unknown (an external producer without epoch_samples)
  std::optional<bool> last_in_epoch;  // unset: batch == batches_in_epoch - 1
  uint64_t samples_in_epoch = 0;
  uint32_t num_samples = 0;        // n distinct samples already written at [0, n)
  uint32_t skipped = 0;
  uint32_t repeats = 0;            // the last `repeats` of [0, n) repeat others' samples
  pipeline::SampleLayout layout;   // of this batch's images
  uint64_t labels_offset = 0, ids_offset = 0;
  uint64_t capacity_samples = 0;   // label/id entries a slot holds
  uint64_t images_bytes = 0;       // image bytes a slot holds (0: capacity × sample bytes)
  float lr_factor = 1.0f;
  int32_t image_size = 0;          // 0: the layout's height
  uint32_t scale_num = 0, scale_den = 0, scale_cap = 0;  // progressive resizing (0: none)
  uint32_t lr_rule = shm::kLrGiven;
  std::span<const TensorSlot> tensors;  // further named tensors (the slot layout's)
  // The view groups made for this position; empty: the leader's view alone, at the front.
  std::span<const GroupRegion> groups;
};

// The largest fill tail needed by the consumers that receive position `seq` and are in
// `only` (each at its own, possibly scaled, batch size).
uint32_t TailForReceivers(const shm::RingLeader& ring, uint64_t seq, uint64_t only,
                          const SlotContents& c);

// Writes the tail (position n + j holds a copy of sample j mod n: image in every group, label,
// id and every fixed-shape named tensor; a variable-length one is read from sample j mod n by
// consumers) and the descriptor of `w`. Fails, writing nothing, when n + tail does not fit
// the slot.
Status CompleteSlot(const shm::SlotWrite& w, uint32_t tail, const SlotContents& c);

}  // namespace batchcast::producer
