// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/crop_decode.h"

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
#include <csetjmp>
#include <jpeglib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/errors.h"

namespace batchcast::pipeline {
namespace {

// TurboJPEG's TJFLAG_LIMITSCANS limit, kept so both decoders refuse the same images.
constexpr int kMaxProgressiveScans = 500;

// The narrowest region decoded (Decode): wide enough for libjpeg-turbo's smoothing upsampler.
constexpr int kMinRegionWidth = 16;

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

// MCU rows per restart interval when the file's one scan is sequential, Huffman-coded, holds
// every component and restarts at MCU-row boundaries (jpeg_read_header has read its SOS);
// 0 otherwise: no restart markers, not at row boundaries, progressive, arithmetic-coded,
// several scans, or one component with sampling factors other than 1x1.
int RowsPerRestartInterval(const jpeg_decompress_struct& ci) {
  if (ci.progressive_mode || ci.arith_code || ci.restart_interval == 0 || ci.num_components > 4 ||
      ci.comps_in_scan != ci.num_components)
    return 0;
  long per_row = 0;  // MCUs in one MCU row
  if (ci.comps_in_scan == 1) {
    const jpeg_component_info* c = ci.cur_comp_info[0];
    if (c->h_samp_factor != 1 || c->v_samp_factor != 1) return 0;
    per_row = (long(ci.image_width) + DCTSIZE - 1) / DCTSIZE;
  } else {
    const long mcu_w = long(ci.max_h_samp_factor) * DCTSIZE;
    per_row = (long(ci.image_width) + mcu_w - 1) / mcu_w;
  }
  if (per_row <= 0 || long(ci.restart_interval) % per_row != 0) return 0;
  return int(long(ci.restart_interval) / per_row);
}

// Where restart interval number `interval` (counting from 0) begins: the offset just after
// the restart marker that ends the interval before it, found by walking the entropy-coded
// data from `scan` (the byte after the SOS segment). -1 when a marker other
// than the expected restart marker, or the end of the data, comes first (a damaged file:
// the whole-file path then reports it as a full decode would).
ptrdiff_t IntervalStart(std::span<const uint8_t> bytes, size_t scan, int interval) {
  const uint8_t* p = bytes.data() + scan;
  const uint8_t* const end = bytes.data() + bytes.size();
  for (int seen = 0; seen < interval;) {
    p = static_cast<const uint8_t*>(std::memchr(p, 0xff, size_t(end - p)));
    if (p == nullptr) return -1;
    while (p < end && *p == 0xff) ++p;  // fill bytes
    if (p == end) return -1;
    const uint8_t m = *p++;
    if (m == 0x00) continue;  // a stuffed 0xff data byte
    if (m != JPEG_RST0 + (seen & 7)) return -1;
    ++seen;
  }
  return p - bytes.data();
}

// The offset of the SOF segment's image height in the header bytes [0, scan), or -1.
ptrdiff_t SofHeightOffset(std::span<const uint8_t> bytes, size_t scan) {
  size_t p = 2;  // after SOI
  while (p + 4 <= scan) {
    if (bytes[p] != 0xff) return -1;
    while (p < scan && bytes[p] == 0xff) ++p;
    if (p + 3 > scan) return -1;
    const uint8_t m = bytes[p];
    if (m == 0x01 || (m >= 0xd0 && m <= 0xd8)) {  // TEM, RSTn, SOI: no length (libjpeg skips them)
      ++p;
      continue;
    }
    const size_t length = size_t(bytes[p + 1]) << 8 | bytes[p + 2];
    if (m == 0xc0 || m == 0xc1) return p + 6 <= scan && length >= 5 ? ptrdiff_t(p + 4) : -1;
    if (m == 0xda || length < 2) return -1;
    p += 1 + length;
  }
  return -1;
}

}  // namespace

struct JpegCropDecoder::State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  jpeg_progress_mgr progress;
  std::vector<JSAMPROW> rows;      // output row pointers
  std::vector<uint8_t> cmyk;       // CMYK rows before conversion
  DecodedImage rgb;                // CMYK -> RGB before RGB -> gray
  std::vector<uint8_t> restarted;  // the image from a restart interval on (StartAtInterval)
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
    if (ci.mem != nullptr) jpeg_abort_decompress(&ci);
    return CorruptDataError("jpeg decode failed: {}", s.err.message);
  }
  // A new decompressor for every image: libjpeg keeps the quantisation and Huffman tables of
  // earlier images in their slots, so a file that leaves one out would decode with what this
  // worker decoded before (ImageDecoder::DecodeJpeg does the same; about 0.1 us).
  jpeg_destroy_decompress(&ci);
  jpeg_create_decompress(&ci);
  ci.progress = &s.progress;
  jpeg_mem_src(&ci, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&ci, TRUE);
  ci.scale_num = static_cast<unsigned int>(scale_num);
  ci.scale_denom = kScaleDenom;
  // A file with restart markers at MCU-row boundaries is decoded from the restart interval
  // above the box's rows (StartAtInterval): `skipped` output rows are never read.
  const int skipped = StartAtInterval(bytes, box.y);
  ci.scale_num = static_cast<unsigned int>(scale_num);  // jpeg_read_header reset them
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
  int x0 = std::max(0, box.x - 1), x1 = std::min(out_w, box.x + box.width + 1);
  // libjpeg-turbo upsamples a component of 2 or fewer samples per row by replication instead
  // of its smoothing ("fancy") filter: a region of 16 columns or more keeps every subsampled
  // component (up to 4:1 horizontally) above that, as in the full decode (fuzz_image found a
  // 2-column region at the image's left edge decoded with the other filter).
  if (x1 - x0 < kMinRegionWidth) {
    x1 = std::min(out_w, x0 + kMinRegionWidth);
    x0 = std::max(0, x1 - kMinRegionWidth);
  }
  const int y0 = box.y - skipped, y1 = y0 + box.height;
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
  *box_in_out = CropBox{box.x - static_cast<int>(xoffset), 0, box.width, box.height};
  return Status::Ok();
}

// Called after jpeg_read_header and the scale: when the file restarts at MCU-row boundaries
// and the box starts two or more iMCU rows down, re-reads the image from the restart
// interval that holds the iMCU row above the box's first (the upsampler's context rows) and
// returns the output rows above that interval's first, else 0 (the file as it is). The image
// from there is a JPEG of its own: the header with the SOF height reduced by the rows left
// out, then the entropy-coded data from the interval on, with the restart markers renumbered
// to count from RST0 (a damaged marker stays damaged: its number is shifted like the others).
// The DC predictions reset at every restart marker, so every coefficient decodes as it does
// in the whole file, and the rows read are bit-exact (CropDecodeTest).
int JpegCropDecoder::StartAtInterval(std::span<const uint8_t> bytes, int box_y) {
  State& s = *state_;
  jpeg_decompress_struct& ci = s.cinfo;
  const int rows_per_interval = RowsPerRestartInterval(ci);
  if (rows_per_interval == 0 || box_y == 0) return 0;
  jpeg_calc_output_dimensions(&ci);
  const int imcu_out = ci.max_v_samp_factor * ci.min_DCT_scaled_size;  // output rows per iMCU row
  const int imcu_full = ci.max_v_samp_factor * DCTSIZE;                // image rows per iMCU row
  const int context_row = box_y / imcu_out - 1;
  const int interval = context_row < 0 ? 0 : context_row / rows_per_interval;
  if (interval == 0) return 0;
  const int64_t first_row = int64_t(interval) * rows_per_interval;  // in iMCU rows
  const int64_t height = int64_t(ci.image_height) - first_row * imcu_full;
  const int64_t skipped = first_row * imcu_out;
  // The output height of the rest must be the rest of the output height (it is for every
  // scale libjpeg-turbo has: whole iMCU rows scale exactly); anything else: the whole file.
  if (height <= 0 || (height * ci.scale_num + ci.scale_denom - 1) / ci.scale_denom !=
                         int64_t(ci.output_height) - skipped)
    return 0;
  const size_t scan = size_t(ci.src->next_input_byte - bytes.data());
  const ptrdiff_t start = IntervalStart(bytes, scan, interval);
  const ptrdiff_t sof_height = SofHeightOffset(bytes, scan);
  if (start < 0 || sof_height < 0) return 0;
  std::vector<uint8_t>& r = s.restarted;
  r.resize(scan + (bytes.size() - size_t(start)));
  std::memcpy(r.data(), bytes.data(), scan);
  r[size_t(sof_height)] = uint8_t(height >> 8);
  r[size_t(sof_height) + 1] = uint8_t(height);
  // The rest, each restart marker's number lowered by `interval` (mod 8).
  uint8_t* out = r.data() + scan;
  const uint8_t* p = bytes.data() + start;
  const uint8_t* const end = bytes.data() + bytes.size();
  while (p < end) {
    const uint8_t* m = static_cast<const uint8_t*>(std::memchr(p, 0xff, size_t(end - p)));
    if (m != nullptr)
      while (m < end && *m == 0xff) ++m;  // m: the byte after a run of 0xff (fill bytes)
    const uint8_t* stop = m == nullptr || m == end ? end : m + 1;
    std::memcpy(out, p, size_t(stop - p));
    out += stop - p;
    if (m != nullptr && m != end && *m >= JPEG_RST0 && *m <= JPEG_RST0 + 7)
      out[-1] = uint8_t(JPEG_RST0 + ((*m - JPEG_RST0 - interval) & 7));
    p = stop;
  }
  jpeg_abort_decompress(&ci);
  jpeg_mem_src(&ci, r.data(), static_cast<unsigned long>(r.size()));
  jpeg_read_header(&ci, TRUE);
  return int(skipped);
}

}  // namespace batchcast::pipeline
