// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/stored_form.h"

#include <algorithm>
#include <memory>

#include "core/errors.h"
#include "pipeline/decode.h"
#include "pipeline/transform.h"

namespace batchcast::pipeline {
namespace {

// Converters accept images up to 2^31 pixels; the leader's max_pixels applies when it reads.
constexpr int64_t kConvertMaxPixels = int64_t(1) << 31;

// The stored size of a width x height image under `form`.
void TargetSize(const data::StoreForm& form, int width, int height, int* tw, int* th) {
  if (form.kind != data::StoreForm::Kind::kResized) {
    *tw = width;
    *th = height;
  } else if (form.short_side > 0) {
    data::ShorterSideSize(width, height, form.short_side, tw, th);
  } else {
    *tw = form.width;
    *th = form.height;
  }
}

}  // namespace

Result<data::StoredPixels> MakeStoredPixels(const data::StoreForm& form, std::span<const uint8_t> sample,
                                      int width, int height, int channels) {
  if (!form.stores_pixels())
    return InvalidArgumentError("stored form {} keeps the encoded bytes; no pixels to make",
                                form.ToString());
  thread_local std::unique_ptr<ImageDecoder> decoder;
  DecodedImage decoded;
  PixelView view;
  int tw = 0, th = 0;
  if (channels > 0) {  // raw pixels
    if (channels != 1 && channels != 3)
      return InvalidArgumentError("raw samples with {} channels cannot be stored as {} (1 or 3)",
                                  channels, form.ToString());
    if (width <= 0 || height <= 0 || sample.size() != size_t(width) * height * channels)
      return CorruptDataError("a raw sample of {} bytes is not {}x{}x{} pixels; re-create the "
                              "dataset with `batchcast convert`", sample.size(), width, height,
                              channels);
    view = PixelView{sample.data(), size_t(width) * channels, width, height, channels};
    TargetSize(form, width, height, &tw, &th);
  } else {
    if (!decoder) {
      BC_ASSIGN_OR_RETURN(ImageDecoder d, ImageDecoder::Create());
      decoder = std::make_unique<ImageDecoder>(std::move(d));
    }
    BC_ASSIGN_OR_RETURN(ImageHeader header, decoder->ReadHeader(sample, kConvertMaxPixels));
    TargetSize(form, header.width, header.height, &tw, &th);
    // As the leader decodes a whole-image box for a tw x th output (crop=none): DCT-scaled
    // to the smallest scale that still covers the target.
    int scale = kScaleDenom;
    if (form.kind == data::StoreForm::Kind::kResized && header.format == ImageFormat::kJpeg)
      scale = ChooseScaleNum(header.width, header.height, tw, th);
    BC_RETURN_IF_ERROR(
        decoder->Decode(sample, header, scale, header.channels == 1 ? 1 : 3, &decoded));
    view = PixelView{decoded.data(), decoded.stride(), decoded.width, decoded.height,
                     decoded.channels};
  }
  data::StoredPixels out;
  const bool exact = form.kind == data::StoreForm::Kind::kResized && form.short_side == 0;
  out.shape = data::StoredShape{tw, th, view.channels};
  if (form.kind == data::StoreForm::Kind::kDecoded ||
      (view.width == tw && view.height == th)) {  // nothing to resample
    out.pixels.resize(out.shape.bytes());
    for (int y = 0; y < th; ++y)
      std::copy_n(view.data + size_t(y) * view.stride, size_t(tw) * view.channels,
                  out.pixels.data() + size_t(y) * tw * view.channels);
  } else {
    out.pixels.resize(out.shape.bytes());
    ResizeBox(view, FullBox(view.width, view.height), tw, th, out.pixels.data(),
              size_t(tw) * view.channels);
  }
  if (exact && out.shape.channels == 1) {  // one channel count per fixed-shape file
    ConvertChannels(out.pixels.data(), tw, th, 1, 3, &decoded);
    out.pixels.assign(decoded.pixels.begin(), decoded.pixels.end());
    out.shape.channels = 3;
  }
  return out;
}

}  // namespace batchcast::pipeline
