// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// make_photo_dataset OUT.h5 [--images N] [--width W] [--height H] [--quality Q]
//                           [--corrupt-index I] [--corrupt-from I]
// Writes the real-photo JPEG set of tests/mpi/photo_set.h (the MPI tests' and the fan-out
// benchmark's data) in the Batchcast HDF5 layout.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/mpi/photo_set.h"

int main(int argc, char** argv) {
  batchcast::mpitest::PhotoSetSpec spec;
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_photo_dataset OUT.h5 [--images N] [--width W] [--height H] "
                         "[--quality Q] [--corrupt-index I] [--corrupt-from I]\n");
    return 2;
  }
  spec.out = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (k == "--images") spec.images = v;
    else if (k == "--width") spec.width = v;
    else if (k == "--height") spec.height = v;
    else if (k == "--quality") spec.quality = v;
    else if (k == "--corrupt-index") spec.corrupt_index = v;
    else if (k == "--corrupt-from") spec.corrupt_from = v;
    else {
      std::fprintf(stderr, "make_photo_dataset: unknown argument '%s'\n", k.c_str());
      return 2;
    }
  }
  batchcast::Status st = batchcast::mpitest::MakePhotoDataset(spec);
  if (!st.ok()) {
    std::fprintf(stderr, "make_photo_dataset: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
