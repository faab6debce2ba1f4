// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Test, fuzz and benchmark helpers that rewrite JPEG files without decoding their pixels.
// AddRestartMarkers: the file re-coded losslessly with a restart marker at every MCU row (the
// libjpeg API's transcoder, as `jpegtran -restart 1` does): the quantised DCT coefficients are
// copied, only the entropy coding is redone (optimal Huffman tables, one interleaved scan), so
// every decoder gives the same pixels as from the original. Cameras and some encoders write
// such files; the crop decoder enters them at the box's restart interval
// (pipeline/crop_decode.h). Not part of the product: docs/pipeline.md, "Restart markers",
// says why `batchcast convert` does not add them. WithoutSegments: the file without some of
// its header segments (a DQT or DHT left out). RestartIntervalStarts: where each interval
// after the first begins.
#pragma once

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <jpeglib.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace batchcast::testing {
namespace restart_detail {

struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] inline void ErrorExit(j_common_ptr c) {
  auto* err = reinterpret_cast<ErrorManager*>(c->err);
  (*c->err->format_message)(c, err->message);
  longjmp(err->jump, 1);
}

// A warning (corrupt data, a premature end) is an error: a damaged file is not re-coded.
inline void EmitMessage(j_common_ptr c, int level) {
  if (level < 0) ErrorExit(c);
}

// Both structs and the output buffer, released on every path (a longjmp skips destructors,
// so nothing on the frame between setjmp and the error may own memory).
struct Transcoder {
  jpeg_decompress_struct src{};
  jpeg_compress_struct dst{};
  ErrorManager err{};
  unsigned char* out = nullptr;
  unsigned long out_size = 0;  // NOLINT(runtime/int): libjpeg's type
  bool src_created = false, dst_created = false;
  ~Transcoder() {
    if (dst_created) jpeg_destroy_compress(&dst);
    if (src_created) jpeg_destroy_decompress(&src);
    std::free(out);
  }
};

}  // namespace restart_detail

// `jpeg` with a restart marker at every MCU row, or empty (with *why set) for a progressive
// or damaged file. EXIF, ICC and comment markers are copied; JFIF and Adobe markers are
// written by libjpeg from the colour space.
inline std::vector<uint8_t> AddRestartMarkers(std::span<const uint8_t> jpeg, std::string* why = nullptr) {
  using namespace restart_detail;
  Transcoder t;
  t.src.err = jpeg_std_error(&t.err.pub);
  t.dst.err = t.src.err;
  t.err.pub.error_exit = ErrorExit;
  t.err.pub.emit_message = EmitMessage;
  if (setjmp(t.err.jump)) {
    if (why != nullptr) *why = t.err.message;
    return {};
  }
  jpeg_create_decompress(&t.src);
  t.src_created = true;
  jpeg_mem_src(&t.src, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  jpeg_save_markers(&t.src, JPEG_COM, 0xffff);
  for (int m = 0; m < 16; ++m) jpeg_save_markers(&t.src, JPEG_APP0 + m, 0xffff);
  jpeg_read_header(&t.src, TRUE);
  if (t.src.progressive_mode) {
    if (why != nullptr) *why = "progressive";
    return {};
  }
  jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&t.src);
  jpeg_create_compress(&t.dst);
  t.dst_created = true;
  jpeg_mem_dest(&t.dst, &t.out, &t.out_size);
  jpeg_copy_critical_parameters(&t.src, &t.dst);
  t.dst.optimize_coding = TRUE;
  t.dst.restart_in_rows = 1;
  jpeg_write_coefficients(&t.dst, coefficients);
  for (jpeg_saved_marker_ptr m = t.src.marker_list; m != nullptr; m = m->next) {
    const bool jfif = m->marker == JPEG_APP0 && m->data_length >= 5 && std::memcmp(m->data, "JFIF", 5) == 0;
    const bool adobe = m->marker == JPEG_APP0 + 14 && m->data_length >= 5 && std::memcmp(m->data, "Adobe", 5) == 0;
    if ((t.dst.write_JFIF_header && jfif) || (t.dst.write_Adobe_marker && adobe)) continue;
    jpeg_write_marker(&t.dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(&t.dst);
  jpeg_finish_decompress(&t.src);
  return std::vector<uint8_t>(t.out, t.out + t.out_size);
}

// `jpeg` without its header segments of marker `marker` (0xdb: DQT, 0xc4: DHT), up to the
// first scan; the rest as it is.
inline std::vector<uint8_t> WithoutSegments(std::span<const uint8_t> jpeg, uint8_t marker) {
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + std::min<size_t>(2, jpeg.size()));
  size_t p = 2;
  while (p + 4 <= jpeg.size() && jpeg[p] == 0xff && jpeg[p + 1] != 0xda) {
    const size_t end = std::min(jpeg.size(), p + 2 + (size_t(jpeg[p + 2]) << 8 | jpeg[p + 3]));
    if (jpeg[p + 1] != marker) out.insert(out.end(), jpeg.begin() + p, jpeg.begin() + end);
    p = end;
  }
  if (p < jpeg.size()) out.insert(out.end(), jpeg.begin() + p, jpeg.end());
  return out;
}

// The offsets just after each restart marker of `jpeg`'s scan: where intervals 1, 2, ... begin.
inline std::vector<size_t> RestartIntervalStarts(std::span<const uint8_t> jpeg) {
  std::vector<size_t> starts;
  size_t i = 2;
  while (i + 1 < jpeg.size() && !(jpeg[i] == 0xff && jpeg[i + 1] == 0xda)) ++i;  // SOS
  for (; i + 1 < jpeg.size(); ++i)
    if (jpeg[i] == 0xff && jpeg[i + 1] >= 0xd0 && jpeg[i + 1] <= 0xd7) starts.push_back(i + 2);
  return starts;
}

}  // namespace batchcast::testing
