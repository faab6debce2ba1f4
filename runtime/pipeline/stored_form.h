// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The offline part of a stored form (data/store_form.h, `batchcast convert --store`): one
// sample decoded (and resized) with the same decoder, DCT scaling rule and resampler as the
// leader's pipeline, so that a leader reading the stored pixels runs only the online steps.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "batchcast/status.h"
#include "data/dataset_reader.h"
#include "data/store_form.h"

namespace batchcast::pipeline {

// `sample` is encoded JPEG/PNG bytes (channels == 0; width/height ignored, the header says)
// or raw width x height x channels pixels (channels 1 or 3). Form decoded: the whole image
// at full size; resized:<S>: DCT-scaled decode to at least the target, then the pipeline's
// resampler to shorter side S (never upscaled); resized:<W>x<H>: the same to exactly W x H,
// gray replicated to 3 channels (a fixed-shape raw file has one channel count). Gray stays
// gray otherwise; color is RGB. Thread-safe (one decoder per thread).
Result<data::StoredPixels> MakeStoredPixels(const data::StoreForm& form, std::span<const uint8_t> sample,
                                      int width, int height, int channels);

}  // namespace batchcast::pipeline
