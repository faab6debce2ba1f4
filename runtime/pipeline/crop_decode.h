// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Crop decoding: a JPEG decoded only where a crop box keeps pixels. Through the libjpeg API
// of libjpeg-turbo: DCT scaling (scale_num/8), jpeg_crop_scanline for the iMCU columns
// that cover the box and jpeg_skip_scanlines / an early stop for the rows above and below
// it. Entropy decoding runs from the top of the image to the box's last row (the bit stream
// has no random access), except in a file with restart markers at MCU-row boundaries, which
// is entered at the restart interval above the box (StartAtInterval); the inverse DCT,
// upsampling and colour conversion run for the box's iMCUs only (at least 16 columns).
// Progressive images are entropy-decoded whole at the start. Every image gets a new libjpeg
// decompressor, so no table of an earlier image is used.
//
// Equality: the pixels inside the box are bit-exact with a full decode at the same scale
// (ImageDecoder::Decode), because the decoded region keeps one pixel of context left and
// right (fancy upsampling reads the neighbouring chroma sample; the region's edge columns
// are computed as image edges) and libjpeg-turbo decodes the context rows above and below
// itself. tests/unit/pipeline/crop_decode_test.cc checks this on baseline, progressive,
// gray, 4:4:4, 4:2:0, 4:2:2, CMYK and odd sizes at every scale, with box edges on and next
// to iMCU boundaries.
//
// Errors are those of ImageDecoder::Decode (warnings such as a truncated file stop the
// decode, and progressive images with more than 500 scans are refused), with one
// difference: damage below the box's last iMCU row is never read, so it is not an error.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "batchcast/status.h"
#include "pipeline/decode.h"
#include "pipeline/transform.h"

namespace batchcast::pipeline {

class JpegCropDecoder {
 public:
  static Result<JpegCropDecoder> Create();
  JpegCropDecoder(JpegCropDecoder&&) noexcept;
  JpegCropDecoder& operator=(JpegCropDecoder&&) noexcept;
  ~JpegCropDecoder();

  // Decodes the part of the JPEG `bytes` (header: `header`) that covers `box`, a box of the
  // image as decoded at scale_num/8 (ScaledDim of each side), into *out with `channels`
  // (1 or 3). *box_in_out: where `box` lies in *out. out->pixels is grown, never shrunk
  // (no zeroing of bytes the decode writes): it may hold more than width x height pixels.
  Status Decode(std::span<const uint8_t> bytes, const ImageHeader& header, int scale_num,
                int channels, const CropBox& box, DecodedImage* out, CropBox* box_in_out);

 private:
  struct State;
  explicit JpegCropDecoder(std::unique_ptr<State> state);
  // After jpeg_read_header: re-reads a file with row restart markers from the interval
  // above output row box_y; returns the output rows left out (0: the file as it is).
  int StartAtInterval(std::span<const uint8_t> bytes, int box_y);
  std::unique_ptr<State> state_;
};

}  // namespace batchcast::pipeline
