// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Image decoding for the pipeline: JPEG through TurboJPEG (with DCT-domain scaling by
// 1/2, 1/4 or 1/8 when the transform needs fewer pixels), PNG through libspng, and raw
// H x W x C pixels. Every decode reads the header first and refuses images over the pixel
// limit before anything is allocated for them (decompression bombs).
//
// An ImageDecoder is owned by one worker thread: it keeps its TurboJPEG handle across
// images (tjInitDecompress is not free) and recreates it after any failed header or
// decode, so a bad image never affects the next one. Error messages name the cause only;
// the pipeline adds the file and the sample index.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::pipeline {

enum class ImageFormat { kUnknown, kJpeg, kPng };

ImageFormat DetectFormat(std::span<const uint8_t> bytes);

struct ImageHeader {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0, height = 0;
  int channels = 0;   // as stored: 1 (gray), 3 (color) or 4 (CMYK / RGBA)
  bool cmyk = false;  // JPEG stored as CMYK or YCCK
};

// A decoded image, HWC uint8, rows packed. The buffer is reused across images.
struct DecodedImage {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
  uint8_t* data() { return pixels.data(); }
  const uint8_t* data() const { return pixels.data(); }
  size_t stride() const { return size_t(width) * channels; }
};

// DCT scaling factors this decoder uses, as numerators over 8 (1/8, 1/4, 1/2, 1). The
// other factors libjpeg-turbo offers (3/8, 5/8, ...) have no SIMD inverse DCT and cost
// more than a full-size decode; see docs/pipeline.md.
inline constexpr int kScaleNums[] = {1, 2, 4, 8};
inline constexpr int kScaleDenom = 8;

// Size of a dimension decoded at scale_num/8 (libjpeg rounds up).
inline int ScaledDim(int dim, int scale_num) {
  return static_cast<int>((int64_t(dim) * scale_num + kScaleDenom - 1) / kScaleDenom);
}

// The smallest scale (numerator over 8) at which a box_w x box_h region of the image still
// covers at least out_w x out_h pixels; 8 (no scaling) when none does.
int ChooseScaleNum(int box_w, int box_h, int out_w, int out_h);

class JpegCropDecoder;  // crop_decode.h

class ImageDecoder {
 public:
  static Result<ImageDecoder> Create();
  ImageDecoder(ImageDecoder&& other) noexcept;
  ImageDecoder& operator=(ImageDecoder&& other) noexcept;
  ~ImageDecoder();

  // Reads the header of an encoded image and checks width x height <= max_pixels.
  Result<ImageHeader> ReadHeader(std::span<const uint8_t> bytes, int64_t max_pixels);

  // Decodes `bytes` (whose header is `header`) into *out with `channels` (1 or 3)
  // channels. JPEG is decoded at scale_num/8 of its size; PNG ignores scale_num.
  Status Decode(std::span<const uint8_t> bytes, const ImageHeader& header, int scale_num,
                int channels, DecodedImage* out);

 private:
  explicit ImageDecoder(void* tj);
  // Replaces the TurboJPEG handle after an error (see decode.cc).
  Status RecreateHandle();
  Status DecodeJpeg(std::span<const uint8_t> bytes, const ImageHeader& header, int scale_num,
                    int channels, DecodedImage* out);
  Status DecodePng(std::span<const uint8_t> bytes, const ImageHeader& header, int channels,
                   DecodedImage* out);

  void* tj_ = nullptr;             // tjhandle
  std::vector<uint8_t> scratch_;   // CMYK or RGB pixels before a channel conversion
  DecodedImage gray_;              // CMYK -> RGB before RGB -> gray
  // libjpeg's API at an exact scale, for the images TurboJPEG 2 would decode at another
  // scale (TurboJpegTakesScale in decode.cc); made at the first such image.
  std::unique_ptr<JpegCropDecoder> exact_;
};

// Converts packed HWC pixels between 1, 3 and 4 (RGBA; alpha dropped) channels into *out.
// Gray from RGB uses the ITU-R BT.601 weights, as libjpeg does.
void ConvertChannels(const uint8_t* src, int width, int height, int src_channels,
                     int dst_channels, DecodedImage* out);

}  // namespace batchcast::pipeline
