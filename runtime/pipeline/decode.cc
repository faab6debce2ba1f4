// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/decode.h"

#include <spng.h>
#include <turbojpeg.h>

#include <cstring>
#include <memory>

#include "core/errors.h"
#include "pipeline/crop_decode.h"

namespace batchcast::pipeline {
namespace {

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

uint32_t ReadBigEndian32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

Status CheckPixels(const char* what, int64_t width, int64_t height, int64_t max_pixels) {
  if (width <= 0 || height <= 0)
    return CorruptDataError("{} header has invalid size {}x{}", what, width, height);
  if (width * height > max_pixels)
    return OutOfRangeError("{} image is {}x{} = {} pixels, over the limit max_pixels={}", what,
                           width, height, width * height, max_pixels);
  return Status::Ok();
}

Result<ImageHeader> ReadPngHeader(std::span<const uint8_t> bytes, int64_t max_pixels) {
  // Signature (8), IHDR length (4), "IHDR" (4), width, height, depth, color type...
  if (bytes.size() < 33 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0)
    return CorruptDataError("png header is truncated or does not start with an IHDR chunk");
  ImageHeader h;
  h.format = ImageFormat::kPng;
  uint32_t w = ReadBigEndian32(bytes.data() + 16), ht = ReadBigEndian32(bytes.data() + 20);
  if (w > 0x7fffffffu || ht > 0x7fffffffu)
    return CorruptDataError("png header has invalid size {}x{}", w, ht);
  BC_RETURN_IF_ERROR(CheckPixels("png", w, ht, max_pixels));
  h.width = static_cast<int>(w);
  h.height = static_cast<int>(ht);
  uint8_t color_type = bytes[25];
  h.channels = (color_type == 0 || color_type == 4) ? 1 : (color_type == 6 ? 4 : 3);
  return h;
}

// Inverted (Adobe) CMYK to RGB, as libjpeg-turbo's cmyk.h defines it: r = c * k / 255.
void CmykToRgb(const uint8_t* src, int pixels, uint8_t* dst) {
  for (int i = 0; i < pixels; ++i, src += 4, dst += 3) {
    int k = src[3];
    dst[0] = static_cast<uint8_t>(src[0] * k / 255);
    dst[1] = static_cast<uint8_t>(src[1] * k / 255);
    dst[2] = static_cast<uint8_t>(src[2] * k / 255);
  }
}

struct SpngCtxDeleter {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};

// Whether tjDecompress2, asked for the output size of scale_num/8, decodes at scale_num/8.
// TurboJPEG 2 takes the scale from the output size (the largest of its factors whose output
// fits), and on an image under 8 pixels on a side two factors can give one size: a 2x4 image
// is 1x1 at 1/8 and at 1/4, and it would take 1/4. (fuzz_image found it: the crop decoder,
// which sets the scale itself, disagreed with the full decode of a 2x4 image.)
bool TurboJpegTakesScale(int width, int height, int scale_num) {
  const int w = ScaledDim(width, scale_num), h = ScaledDim(height, scale_num);
  int n = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&n);  // largest first
  for (int i = 0; factors != nullptr && i < n; ++i) {
    const tjscalingfactor f = factors[i];
    if (TJSCALED(width, f) <= w && TJSCALED(height, f) <= h)
      return f.num * kScaleDenom == scale_num * f.denom;
  }
  return false;
}

}  // namespace

ImageFormat DetectFormat(std::span<const uint8_t> bytes) {
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff)
    return ImageFormat::kJpeg;
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngMagic, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

int ChooseScaleNum(int box_w, int box_h, int out_w, int out_h) {
  for (int num : kScaleNums) {
    if (int64_t(box_w) * num / kScaleDenom >= out_w && int64_t(box_h) * num / kScaleDenom >= out_h)
      return num;
  }
  return kScaleDenom;
}

void ConvertChannels(const uint8_t* src, int width, int height, int src_channels,
                     int dst_channels, DecodedImage* out) {
  out->width = width;
  out->height = height;
  out->channels = dst_channels;
  size_t pixels = size_t(width) * height;
  out->pixels.resize(pixels * dst_channels);
  uint8_t* dst = out->pixels.data();
  for (size_t i = 0; i < pixels; ++i, src += src_channels, dst += dst_channels) {
    if (dst_channels == 1) {
      // Fixed-point BT.601 luma with rounding; exact for r == g == b.
      dst[0] = src_channels == 1 ? src[0]
                                 : static_cast<uint8_t>((19595 * src[0] + 38470 * src[1] +
                                                         7471 * src[2] + 32768) >> 16);
    } else if (src_channels == 1) {
      dst[0] = dst[1] = dst[2] = src[0];
    } else {
      dst[0] = src[0];
      dst[1] = src[1];
      dst[2] = src[2];
    }
  }
}

ImageDecoder::ImageDecoder(void* tj) : tj_(tj) {}

Result<ImageDecoder> ImageDecoder::Create() {
  tjhandle tj = tjInitDecompress();
  if (tj == nullptr)
    return ResourceExhaustedError("pipeline: cannot create a jpeg decoder: {}",
                                  tjGetErrorStr2(nullptr));
  return ImageDecoder(tj);
}

ImageDecoder::ImageDecoder(ImageDecoder&& other) noexcept
    : tj_(other.tj_),
      scratch_(std::move(other.scratch_)),
      gray_(std::move(other.gray_)),
      exact_(std::move(other.exact_)) {
  other.tj_ = nullptr;
}

ImageDecoder& ImageDecoder::operator=(ImageDecoder&& other) noexcept {
  if (this != &other) {
    if (tj_ != nullptr) tjDestroy(tj_);
    tj_ = other.tj_;
    other.tj_ = nullptr;
    scratch_ = std::move(other.scratch_);
    gray_ = std::move(other.gray_);
    exact_ = std::move(other.exact_);
  }
  return *this;
}

ImageDecoder::~ImageDecoder() {
  if (tj_ != nullptr) tjDestroy(tj_);
}

// libjpeg-turbo 2.1's tjDecompressHeader3 returns from an error without aborting the
// decompressor: the marker reader keeps the bad marker as unread and reports it again for
// every later image ("Unsupported marker type 0x8a" on good files). A new handle after any
// error is the one state nothing can leak from. DecodeJpeg also takes a new handle for every
// image: libjpeg keeps the quantisation and Huffman tables of earlier images in their slots,
// so a file that leaves a table out (a Motion-JPEG frame relying on the standard Huffman
// tables, a damaged file without its DQT) would decode with whatever the worker decoded
// before, instead of the standard tables or an error (fuzz_image found it). A handle costs
// about 0.15 us.
Status ImageDecoder::RecreateHandle() {
  if (tj_ != nullptr) tjDestroy(tj_);
  tj_ = tjInitDecompress();
  if (tj_ == nullptr)
    return ResourceExhaustedError("pipeline: cannot create a jpeg decoder: {}",
                                  tjGetErrorStr2(nullptr));
  return Status::Ok();
}

Result<ImageHeader> ImageDecoder::ReadHeader(std::span<const uint8_t> bytes, int64_t max_pixels) {
  if (bytes.empty()) return CorruptDataError("empty image (0 bytes)");
  ImageFormat format = DetectFormat(bytes);
  if (format == ImageFormat::kPng) return ReadPngHeader(bytes, max_pixels);
  if (format == ImageFormat::kUnknown) {
    return CorruptDataError("unknown image format ({} bytes starting {:02x}), expected jpeg or png",
                            bytes.size(), fmt::join(bytes.first(std::min<size_t>(4, bytes.size())), " "));
  }
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj_, bytes.data(), bytes.size(), &w, &h, &subsamp, &colorspace) != 0) {
    Status error = CorruptDataError("jpeg header is invalid: {}", tjGetErrorStr2(tj_));
    BC_RETURN_IF_ERROR(RecreateHandle());
    return error;
  }
  BC_RETURN_IF_ERROR(CheckPixels("jpeg", w, h, max_pixels));
  ImageHeader header;
  header.format = ImageFormat::kJpeg;
  header.width = w;
  header.height = h;
  header.cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  header.channels = header.cmyk ? 4 : (colorspace == TJCS_GRAY ? 1 : 3);
  return header;
}

Status ImageDecoder::Decode(std::span<const uint8_t> bytes, const ImageHeader& header,
                            int scale_num, int channels, DecodedImage* out) {
  if (header.format == ImageFormat::kJpeg)
    return DecodeJpeg(bytes, header, scale_num, channels, out);
  return DecodePng(bytes, header, channels, out);
}

Status ImageDecoder::DecodeJpeg(std::span<const uint8_t> bytes, const ImageHeader& header,
                                int scale_num, int channels, DecodedImage* out) {
  const int w = ScaledDim(header.width, scale_num), h = ScaledDim(header.height, scale_num);
  if (!TurboJpegTakesScale(header.width, header.height, scale_num)) {
    // The whole image as the crop decoder's box: libjpeg's API at exactly this scale, the
    // same errors on warnings and scan limits, the same CMYK and gray conversions.
    if (exact_ == nullptr) {
      BC_ASSIGN_OR_RETURN(JpegCropDecoder exact, JpegCropDecoder::Create());
      exact_ = std::make_unique<JpegCropDecoder>(std::move(exact));
    }
    CropBox in;
    BC_RETURN_IF_ERROR(
        exact_->Decode(bytes, header, scale_num, channels, CropBox{0, 0, w, h}, out, &in));
    out->pixels.resize(size_t(w) * h * channels);  // it grows its buffers only
    return Status::Ok();
  }
  // CMYK has no libjpeg conversion to RGB: decode to CMYK, then convert.
  const bool cmyk = header.cmyk;
  const int decoded_channels = cmyk ? 4 : channels;
  const int pf = cmyk ? TJPF_CMYK : (channels == 1 ? TJPF_GRAY : TJPF_RGB);
  std::vector<uint8_t>& target = out->pixels;
  std::vector<uint8_t>& buf = cmyk ? scratch_ : target;
  buf.resize(size_t(w) * h * decoded_channels);
  // STOPONWARNING: a truncated file ("Premature end of JPEG file") is an error, not a
  // grey bottom half. LIMITSCANS: refuse progressive images with absurd scan counts.
  const int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
  BC_RETURN_IF_ERROR(RecreateHandle());  // no tables from earlier images
  if (tjDecompress2(tj_, bytes.data(), bytes.size(), buf.data(), w, w * decoded_channels, h, pf,
                    flags) != 0) {
    Status error = CorruptDataError("jpeg decode failed: {}", tjGetErrorStr2(tj_));
    BC_RETURN_IF_ERROR(RecreateHandle());
    return error;
  }
  out->width = w;
  out->height = h;
  out->channels = channels;
  if (cmyk) {
    if (channels == 3) {
      target.resize(size_t(w) * h * 3);
      CmykToRgb(scratch_.data(), w * h, target.data());
    } else {
      gray_.pixels.resize(size_t(w) * h * 3);
      CmykToRgb(scratch_.data(), w * h, gray_.pixels.data());
      std::vector<uint8_t> rgb;
      std::swap(rgb, gray_.pixels);
      ConvertChannels(rgb.data(), w, h, 3, 1, out);
      std::swap(rgb, gray_.pixels);
    }
  }
  return Status::Ok();
}

Status ImageDecoder::DecodePng(std::span<const uint8_t> bytes, const ImageHeader& header,
                               int channels, DecodedImage* out) {
  std::unique_ptr<spng_ctx, SpngCtxDeleter> ctx(spng_ctx_new(0));
  if (!ctx) return ResourceExhaustedError("png decoder: out of memory");
  spng_set_image_limits(ctx.get(), header.width, header.height);
  spng_set_chunk_limits(ctx.get(), 64u << 20, 64u << 20);
  spng_set_crc_action(ctx.get(), SPNG_CRC_ERROR, SPNG_CRC_DISCARD);
  int rc = spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size());
  struct spng_ihdr ihdr;
  if (rc == 0) rc = spng_get_ihdr(ctx.get(), &ihdr);
  // Gray PNGs of up to 8 bits decode straight to gray; everything else through RGB8
  // (palette expanded, 16-bit reduced to 8, alpha dropped).
  const bool direct_gray = rc == 0 && channels == 1 && ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE &&
                           ihdr.bit_depth <= 8;
  const int fmt = direct_gray ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
  size_t size = 0;
  if (rc == 0) rc = spng_decoded_image_size(ctx.get(), fmt, &size);
  const bool convert = !direct_gray && channels == 1;
  std::vector<uint8_t>& buf = convert ? scratch_ : out->pixels;
  if (rc == 0) {
    buf.resize(size);
    rc = spng_decode_image(ctx.get(), buf.data(), size, fmt, 0);
  }
  // spng_decode_image stops at the end of the image data, before the CRC of the last IDAT
  // chunk is checked: read the chunks up to IEND so that a bad IDAT CRC is an error.
  if (rc == 0) rc = spng_decode_chunks(ctx.get());
  if (rc != 0) return CorruptDataError("png decode failed: {}", spng_strerror(rc));
  out->width = header.width;
  out->height = header.height;
  out->channels = channels;
  if (convert) ConvertChannels(scratch_.data(), header.width, header.height, 3, 1, out);
  return Status::Ok();
}

}  // namespace batchcast::pipeline
