// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Storage strategies of a conversion (`batchcast convert ... --store FORM`, docs/dataset-format.md
// "Stored forms"): how much of the pipeline's deterministic part runs once, offline. A stored
// form never includes a random step: crop boxes, flips and normalisation stay online.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "batchcast/status.h"
#include "data/dataset_reader.h"

namespace batchcast::data {

struct StoreForm {
  enum class Kind {
    kEncoded,  // the original JPEG/PNG bytes (decoded every epoch)
    kDecoded,  // the decoded pixels at full size, HWC uint8, per-sample shape
    kResized,  // decoded and resized: shorter side `short_side` (aspect kept, never upscaled),
               // or exactly width x height (what crop=none at image_size does online)
    kBuckets,  // the encoded bytes plus offline progressive-resizing buckets (--buckets)
  };
  Kind kind = Kind::kEncoded;
  int short_side = 0;             // resized:<S>
  int width = 0, height = 0;      // resized:<W>x<H>
  std::vector<int> bucket_sizes;  // buckets:<S1>,<S2>,... (strictly ascending)

  // True when the converter stores pixels (decoded, resized).
  bool stores_pixels() const { return kind == Kind::kDecoded || kind == Kind::kResized; }
  // The spec text this form parses from ("encoded", "decoded", "resized:160", "resized:64x48",
  // "buckets:96,128").
  std::string ToString() const;
};

// One sample's stored pixels (HWC uint8) and their shape.
struct StoredPixels {
  std::vector<uint8_t> pixels;
  StoredShape shape;
};

// Parses `encoded | decoded | resized:<S> | resized:<W>x<H> | buckets:<S1>,<S2>,...`; the error
// names the option, the text and what is accepted.
Result<StoreForm> ParseStoreForm(std::string_view text);

// The stored size of a W x H image resized to shorter side `size`: scaled by min(1, size /
// min(W, H)), rounded, at least 1 (the offline buckets' rule too).
void ShorterSideSize(int width, int height, int size, int* out_width, int* out_height);

}  // namespace batchcast::data
