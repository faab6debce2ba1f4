// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What the leader benchmarks (fanout, scaling, read) share: the real-photo JPEG set, built once
// into a cache directory (tests/mpi/photo_set.h: 500x375 crops of the photos python3-skimage
// ships, quality 90, written by DatasetWriter in the current layout), and the leader's chain
// on it (RandomResizedCrop + flip, uint8, seed 1).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "batchcast/options.h"
#include "tests/mpi/photo_set.h"

namespace batchcast::bench {

// DIR/photos-500x375-q90-n<images>.h5, made on first use; a failure ends the benchmark.
inline std::string CachedPhotoSet(const std::string& dir, int images, const char* who) {
  std::filesystem::create_directories(dir);
  const std::string path = fmt::format("{}/photos-500x375-q90-n{}.h5", dir, images);
  if (std::filesystem::exists(path)) return path;
  mpitest::PhotoSetSpec spec;
  spec.out = path;
  spec.images = images;
  spec.width = 500;
  spec.height = 375;
  spec.quality = 90;
  if (Status st = mpitest::MakePhotoDataset(spec); !st.ok()) {
    std::fprintf(stderr, "%s: %s\n", who, st.ToString().c_str());
    std::exit(1);
  }
  std::printf("%s: wrote %d real-photo JPEGs (500x375, q90) to %s\n", who, images, path.c_str());
  return path;
}

// The leader's chain of the benchmarks: RandomResizedCrop(image_size) + flip, uint8, seed 1.
inline Options PhotoChainOptions(const std::string& dataset, int image_size, int epochs,
                                 int batch, int threads) {
  Options o;
  o.dataset = dataset;
  o.image_size = image_size;
  o.crop = "random";
  o.flip = true;
  o.seed = 1;
  o.epochs = epochs;
  o.batch_size = batch;
  o.threads = threads;
  return o;
}

}  // namespace batchcast::bench
