// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/crop_decode.h"

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
#include <csetjmp>
#include <jpeglib.h>

#include <algorithm>
#include <vector>

#include "core/errors.h"

namespace batchcast::pipeline {
namespace {

// TurboJPEG's TJFLAG_LIMITSCANS limit, kept so both decoders refuse the same images.
constexpr int kMaxProgressiveScans = 500;

struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void ErrorExit(j_common_ptr c) {
  auto* err = reinterpret_cast<ErrorManager*>(c->err);
  (*c->err->format_message)(c, err->message);
  longjmp(err->jump, 1);
}

// A warning (corrupt or truncated data) stops the decode, as TJFLAG_STOPONWARNING does.
void EmitMessage(j_common_ptr c, int level) {
  if (level < 0) ErrorExit(c);
}

void ProgressMonitor(j_common_ptr c) {
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->is_decompressor && d->progressive_mode && d->input_scan_number > kMaxProgressiveScans) {
    auto* err = reinterpret_cast<ErrorManager*>(c->err);
    std::snprintf(err->message, sizeof(err->message),
                  "Progressive JPEG image has more than %d scans", kMaxProgressiveScans);
    longjmp(err->jump, 1);
  }
}

// Inverted (Adobe) CMYK to RGB, one row: r = c * k / 255 (libjpeg-turbo's cmyk.h).
void CmykRowToRgb(const uint8_t* src, int width, uint8_t* dst) {
  for (int x = 0; x < width; ++x, src += 4, dst += 3) {
    const int k = src[3];
    for (int c = 0; c < 3; ++c) dst[c] = static_cast<uint8_t>(src[c] * k / 255);
  }
}

void GrowTo(std::vector<uint8_t>* buffer, size_t bytes) {
  if (buffer->size() < bytes) buffer->resize(bytes);
}

}  // namespace

struct JpegCropDecoder::State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  jpeg_progress_mgr progress;
  std::vector<JSAMPROW> rows;      // output row pointers
  std::vector<uint8_t> cmyk;       // CMYK rows before conversion
  DecodedImage rgb;                // CMYK -> RGB before RGB -> gray
  ~State() { jpeg_destroy_decompress(&cinfo); }
};

Result<JpegCropDecoder> JpegCropDecoder::Create() {
  auto s = std::make_unique<State>();
  s->cinfo.err = jpeg_std_error(&s->err.pub);
  s->err.pub.error_exit = ErrorExit;
  s->err.pub.emit_message = EmitMessage;
  if (setjmp(s->err.jump))
    return ResourceExhaustedError("pipeline: cannot create a jpeg crop decoder: {}", s->err.message);
  jpeg_create_decompress(&s->cinfo);
  s->progress.progress_monitor = ProgressMonitor;
  s->cinfo.progress = &s->progress;
  return JpegCropDecoder(std::move(s));
}

JpegCropDecoder::JpegCropDecoder(std::unique_ptr<State> state) : state_(std::move(state)) {}
JpegCropDecoder::JpegCropDecoder(JpegCropDecoder&&) noexcept = default;
JpegCropDecoder& JpegCropDecoder::operator=(JpegCropDecoder&&) noexcept = default;
JpegCropDecoder::~JpegCropDecoder() = default;

Status JpegCropDecoder::Decode(std::span<const uint8_t> bytes, const ImageHeader& header,
                               int scale_num, int channels, const CropBox& box,
                               DecodedImage* out, CropBox* box_in_out) {
  State& s = *state_;
  jpeg_decompress_struct& ci = s.cinfo;
  // Nothing below may own memory on this frame: a longjmp skips destructors.
  if (setjmp(s.err.jump)) {
    jpeg_abort_decompress(&ci);
    return CorruptDataError("jpeg decode failed: {}", s.err.message);
  }
  jpeg_mem_src(&ci, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&ci, TRUE);
  ci.scale_num = static_cast<unsigned int>(scale_num);
  ci.scale_denom = kScaleDenom;
  // CMYK has no libjpeg conversion to RGB: decode CMYK, convert each row.
  const bool cmyk = header.cmyk;
  ci.out_color_space = cmyk ? JCS_CMYK : (channels == 1 ? JCS_GRAYSCALE : JCS_RGB);
  jpeg_start_decompress(&ci);
  // The box and one pixel of context left and right, within the image (the region's edge
  // columns are upsampled as an image edge; jpeg_crop_scanline widens the region to whole
  // iMCUs on the left). No rows of margin: jpeg_skip_scanlines decodes the context rows the
  // upsampler needs above the first row read, and the rows read are upsampled with the rows
  // below them, as in a full decode (docs/pipeline.md, crop decoding).
  const int out_w = static_cast<int>(ci.output_width);
  const int x0 = std::max(0, box.x - 1), x1 = std::min(out_w, box.x + box.width + 1);
  const int y0 = box.y, y1 = box.y + box.height;
  JDIMENSION xoffset = static_cast<JDIMENSION>(x0), width = static_cast<JDIMENSION>(x1 - x0);
  if (x0 > 0 || x1 < out_w) jpeg_crop_scanline(&ci, &xoffset, &width);  // widened to iMCUs
  if (y0 > 0) jpeg_skip_scanlines(&ci, static_cast<JDIMENSION>(y0));
  const int w = static_cast<int>(width), h = y1 - y0;
  out->width = w;
  out->height = h;
  out->channels = channels;
  const size_t stride = size_t(w) * (cmyk ? 4 : channels);
  // Grow only: resize() would zero every byte past the last (smaller) box, and the decoder
  // writes them all anyway. The buffers may be larger than this image; rows are packed.
  GrowTo(&out->pixels, size_t(w) * h * channels);
  if (cmyk) GrowTo(&s.cmyk, stride * h);
  uint8_t* base = cmyk ? s.cmyk.data() : out->pixels.data();
  s.rows.resize(size_t(h));
  for (int y = 0; y < h; ++y) s.rows[y] = base + size_t(y) * stride;
  while (static_cast<int>(ci.output_scanline) < y1) {
    const int done = static_cast<int>(ci.output_scanline) - y0;
    jpeg_read_scanlines(&ci, s.rows.data() + done, static_cast<JDIMENSION>(h - done));
  }
  jpeg_abort_decompress(&ci);  // the rows below are never decoded
  if (cmyk && channels == 3) {
    for (int y = 0; y < h; ++y) CmykRowToRgb(s.rows[y], w, out->pixels.data() + size_t(y) * w * 3);
  } else if (cmyk) {
    GrowTo(&s.rgb.pixels, size_t(w) * h * 3);
    for (int y = 0; y < h; ++y) CmykRowToRgb(s.rows[y], w, s.rgb.pixels.data() + size_t(y) * w * 3);
    ConvertChannels(s.rgb.pixels.data(), w, h, 3, 1, out);
  }
  *box_in_out = CropBox{box.x - static_cast<int>(xoffset), box.y - y0, box.width, box.height};
  return Status::Ok();
}

}  // namespace batchcast::pipeline
