// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/image_encode.h"

#include "core/errors.h"
#include "data/image_codec_handles.h"

namespace batchcast::data {
namespace {

Status CheckPixels(std::span<const uint8_t> pixels, int width, int height, int channels) {
  if (width <= 0 || height <= 0 || (channels != 1 && channels != 3))
    return InvalidArgumentError("encode: unsupported image {}x{}x{} (need channels 1 or 3)",
                                width, height, channels);
  if (pixels.size() != size_t(width) * height * channels)
    return InvalidArgumentError("encode: {} bytes given for a {}x{}x{} image", pixels.size(),
                                width, height, channels);
  return Status::Ok();
}

}  // namespace

Result<std::vector<uint8_t>> EncodePng(std::span<const uint8_t> pixels, int width, int height,
                                       int channels) {
  BC_RETURN_IF_ERROR(CheckPixels(pixels, width, height, channels));
  SpngContext ctx(spng_ctx_new(SPNG_CTX_ENCODER));
  if (!ctx) return InternalError("png: cannot create an encoder context");
  spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(width);
  ihdr.height = static_cast<uint32_t>(height);
  ihdr.bit_depth = 8;
  ihdr.color_type = channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR;
  int rc = spng_set_ihdr(ctx.get(), &ihdr);
  if (rc == 0)
    rc = spng_encode_image(ctx.get(), pixels.data(), pixels.size(), SPNG_FMT_PNG,
                           SPNG_ENCODE_FINALIZE);
  if (rc != 0) return InternalError("png: encode failed: {}", spng_strerror(rc));
  size_t size = 0;
  void* buf = spng_get_png_buffer(ctx.get(), &size, &rc);
  if (buf == nullptr) return InternalError("png: encode failed: {}", spng_strerror(rc));
  std::vector<uint8_t> out(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + size);
  free(buf);
  return out;
}

Result<std::vector<uint8_t>> EncodeJpeg(std::span<const uint8_t> pixels, int width, int height,
                                        int channels, int quality) {
  BC_RETURN_IF_ERROR(CheckPixels(pixels, width, height, channels));
  if (quality < 1 || quality > 100)
    return InvalidArgumentError("encode: jpeg quality {} is outside 1..100", quality);
  thread_local TurboJpegHandle tj(tjInitCompress());
  if (!tj) return InternalError("jpeg: cannot create a TurboJPEG compressor");
  unsigned char* buf = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int): TurboJPEG's type
  int pf = channels == 1 ? TJPF_GRAY : TJPF_RGB;
  int samp = channels == 1 ? TJSAMP_GRAY : TJSAMP_420;
  if (tjCompress2(tj.get(), pixels.data(), width, 0, height, pf, &buf, &size, samp, quality,
                  TJFLAG_ACCURATEDCT) != 0) {
    std::string err = tjGetErrorStr2(tj.get());
    tjFree(buf);
    return InternalError("jpeg: encode failed: {}", err);
  }
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  return out;
}

}  // namespace batchcast::data
