// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Internal to the data module: owning handles of the image codec libraries (libspng,
// TurboJPEG), shared by the files that probe (image_probe.cc) and encode (image_encode.cc)
// images.
#pragma once

#include <spng.h>
#include <turbojpeg.h>

#include <memory>

namespace batchcast::data {

struct SpngContextDeleter {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};
// A libspng context (spng_ctx_new), freed with spng_ctx_free.
using SpngContext = std::unique_ptr<spng_ctx, SpngContextDeleter>;

struct TurboJpegDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};
// A TurboJPEG handle (tjInitCompress / tjInitDecompress), freed with tjDestroy.
using TurboJpegHandle = std::unique_ptr<void, TurboJpegDeleter>;

}  // namespace batchcast::data
