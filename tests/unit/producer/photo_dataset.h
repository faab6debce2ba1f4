// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Test photos for the decoded-sample cache and stored forms: JPEGs of several sizes and
// subsamplings, gray JPEGs and PNGs (every decode path), in memory or as an HDF5 dataset.
#pragma once

#include <string>
#include <vector>

#include "data/dataset_writer.h"
#include "tests/unit/pipeline/test_images.h"

namespace batchcast::testing {

inline int PhotoWidth(int i) { return 120 + 29 * (i % 5); }
inline int PhotoHeight(int i) { return 90 + 41 * (i % 4); }
inline bool PhotoIsPng(int i) { return i % 7 == 6; }

inline std::vector<std::vector<uint8_t>> PhotoSamples(int n) {
  std::vector<std::vector<uint8_t>> images;
  const int subsamp[] = {TJSAMP_420, TJSAMP_444, TJSAMP_422};
  for (int i = 0; i < n; ++i) {
    Image img = Photo(PhotoWidth(i), PhotoHeight(i));
    if (PhotoIsPng(i)) {
      images.push_back(EncodePng(img.width, img.height, 2, 8, img.pixels));
    } else if (i % 5 == 4) {
      Image gray{img.width, img.height, 1, {}};
      for (size_t p = 0; p < size_t(img.width) * img.height; ++p)
        gray.pixels.push_back(img.pixels[p * 3]);
      images.push_back(EncodeJpeg(gray, 88, TJSAMP_GRAY));
    } else {
      images.push_back(EncodeJpeg(img, 88, subsamp[i % 3]));
    }
  }
  return images;
}

// Writes PhotoSamples(n) (labels i % 2) to `path` in the Batchcast layout.
inline Status WritePhotoDataset(const std::string& path, int n) {
  data::DatasetSpec spec;
  spec.class_names = {"a", "b"};
  BC_ASSIGN_OR_RETURN(auto w, data::DatasetWriter::Create(path, spec));
  auto images = PhotoSamples(n);
  for (int i = 0; i < n; ++i)
    BC_RETURN_IF_ERROR(w->Append(images[i], i % 2, PhotoWidth(i), PhotoHeight(i),
                                 PhotoIsPng(i) ? data::ImageEncoding::kPng
                                               : data::ImageEncoding::kJpeg));
  return w->Finish();
}

}  // namespace batchcast::testing
