// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Test images: a real photo (scikit-image's chelsea.png when installed, else a synthetic
// textured picture), encoders for JPEG (TurboJPEG) and PNG (libspng) of every kind the
// pipeline handles, and a reference JPEG decode through djpeg.
#pragma once

#include <spng.h>
#include <turbojpeg.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pipeline/decode.h"

namespace batchcast::testing {

struct Image {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // HWC
  uint8_t at(int y, int x, int c) const { return pixels[(size_t(y) * width + x) * channels + c]; }
};

// The whole file in one read (empty when it cannot be read). Byte by byte through
// istreambuf_iterator this was most of a sanitizer test's CPU (Photo below, session 14).
inline std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const std::streamsize size = in.tellg();
  if (size <= 0) return {};
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) return {};
  return bytes;
}

inline void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::string TempDir() {
  auto dir = std::filesystem::path(BATCHCAST_BINARY_DIR) / "tests" / "pipeline_tmp";
  std::filesystem::create_directories(dir);
  return dir.string();
}

// scikit-image's chelsea.png decoded to RGB, once per process (nullptr when it is not
// installed or does not decode): every Photo is cut from it, and tests make dozens.
inline const pipeline::DecodedImage* ChelseaPhoto() {
  static const auto* const photo = []() -> const pipeline::DecodedImage* {
    auto bytes = ReadFile("/usr/lib/python3/dist-packages/skimage/data/chelsea.png");
    if (bytes.empty()) return nullptr;
    auto decoder = pipeline::ImageDecoder::Create();
    auto header = decoder->ReadHeader(bytes, 1 << 30);
    auto* d = new pipeline::DecodedImage;  // lives as long as the process
    if (!header.ok() || !decoder->Decode(bytes, *header, 8, 3, d).ok()) {
      delete d;
      return nullptr;
    }
    return d;
  }();
  return photo;
}

// A width x height RGB crop of a real photo (synthetic texture when none is installed).
inline Image Photo(int width, int height) {
  Image img{width, height, 3, std::vector<uint8_t>(size_t(width) * height * 3)};
  if (const pipeline::DecodedImage* photo = ChelseaPhoto()) {
    const pipeline::DecodedImage& d = *photo;
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x)
        for (int c = 0; c < 3; ++c)
          img.pixels[(size_t(y) * width + x) * 3 + c] =
              d.pixels[(size_t(y % d.height) * d.width + x % d.width) * 3 + c];
    return img;
  }
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c)
        img.pixels[(size_t(y) * width + x) * 3 + c] = static_cast<uint8_t>(
            128 + 100 * std::sin(0.05 * x * (c + 1) + 0.03 * y) * std::cos(0.02 * y * (3 - c)));
  return img;
}

// Encodes `img` (1 or 3 channels, or 4 = CMYK) as JPEG.
inline std::vector<uint8_t> EncodeJpeg(const Image& img, int quality, int subsamp,
                                       bool progressive = false) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  int pf = img.channels == 1 ? TJPF_GRAY : (img.channels == 4 ? TJPF_CMYK : TJPF_RGB);
  int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
  int rc = tjCompress2(tj, img.pixels.data(), img.width, 0, img.height, pf, &buf, &size, subsamp,
                       quality, flags);
  std::vector<uint8_t> out;
  if (rc == 0) out.assign(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

// Encodes raw PNG pixel rows (already in the PNG's bit depth, big-endian for 16 bits).
inline std::vector<uint8_t> EncodePng(int width, int height, int color_type, int bit_depth,
                                      const std::vector<uint8_t>& data,
                                      const std::vector<uint8_t>& palette_rgb = {}) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = width;
  ihdr.height = height;
  ihdr.bit_depth = static_cast<uint8_t>(bit_depth);
  ihdr.color_type = static_cast<uint8_t>(color_type);
  spng_set_ihdr(ctx, &ihdr);
  if (!palette_rgb.empty()) {
    spng_plte plte{};
    plte.n_entries = static_cast<uint32_t>(palette_rgb.size() / 3);
    for (uint32_t i = 0; i < plte.n_entries; ++i) {
      plte.entries[i].red = palette_rgb[i * 3];
      plte.entries[i].green = palette_rgb[i * 3 + 1];
      plte.entries[i].blue = palette_rgb[i * 3 + 2];
    }
    spng_set_plte(ctx, &plte);
  }
  std::vector<uint8_t> out;
  if (spng_encode_image(ctx, data.data(), data.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE) == 0) {
    size_t len = 0;
    int err = 0;
    auto* png = static_cast<uint8_t*>(spng_get_png_buffer(ctx, &len, &err));
    if (png != nullptr) out.assign(png, png + len);
    free(png);
  }
  spng_ctx_free(ctx);
  return out;
}

// The reference decode: djpeg's PPM/PGM output (optionally DCT-scaled, "1/4").
inline Image DjpegDecode(const std::vector<uint8_t>& jpeg, const std::string& scale = "") {
  static int counter = 0;
  std::string base = TempDir() + "/ref" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  WriteFile(base + ".jpg", jpeg);
  std::string cmd = "djpeg -pnm " + (scale.empty() ? "" : "-scale " + scale + " ") + base +
                    ".jpg > " + base + ".pnm";
  Image img;
  if (std::system(cmd.c_str()) != 0) return img;
  auto bytes = ReadFile(base + ".pnm");
  std::filesystem::remove(base + ".jpg");
  std::filesystem::remove(base + ".pnm");
  // "P5|P6\n<w> <h>\n255\n" then pixels.
  int maxval = 0;
  char magic[3] = {0, 0, 0};
  int consumed = 0;
  if (std::sscanf(reinterpret_cast<const char*>(bytes.data()), "%2s %d %d %d%n", magic, &img.width,
                  &img.height, &maxval, &consumed) != 4)
    return Image();
  img.channels = magic[1] == '5' ? 1 : 3;
  size_t n = size_t(img.width) * img.height * img.channels;
  img.pixels.assign(bytes.begin() + consumed + 1, bytes.begin() + consumed + 1 + n);
  return img;
}

}  // namespace batchcast::testing
