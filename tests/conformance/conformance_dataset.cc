// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// conformance_dataset OUT.h5 N BAD,BAD,...
// The conformance scenario's dataset: N real-photo JPEGs (tests/mpi/photo_set.h, 32 x 24),
// the listed samples truncated (corrupt: a pattern of bad samples the leaders skip).
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "tests/mpi/photo_set.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: conformance_dataset OUT.h5 N BAD,BAD,...\n");
    return 2;
  }
  std::set<int> bad;
  for (const char* p = argv[3]; *p != '\0';) {
    char* end = nullptr;
    bad.insert(static_cast<int>(std::strtol(p, &end, 10)));
    p = *end == ',' ? end + 1 : end;
  }
  batchcast::mpitest::PhotoSetSpec spec;
  spec.out = argv[1];
  spec.images = std::atoi(argv[2]);
  spec.width = 32;
  spec.height = 24;
  auto run = [&]() -> batchcast::Status {
    BC_ASSIGN_OR_RETURN(auto photos, batchcast::mpitest::LoadPhotos());
    batchcast::data::DatasetSpec ds;
    ds.kind = batchcast::data::SampleKind::kEncoded;
    for (int c = 0; c < spec.classes; ++c) ds.class_names.push_back("class" + std::to_string(c));
    ds.overwrite = true;
    ds.created_by = "batchcast tests/conformance";
    BC_ASSIGN_OR_RETURN(auto writer, batchcast::data::DatasetWriter::Create(spec.out, ds));
    for (int i = 0; i < spec.images; ++i) {
      BC_ASSIGN_OR_RETURN(auto jpeg,
                          batchcast::mpitest::MakePhotoJpeg(photos[i % photos.size()], i, spec));
      if (bad.count(i)) jpeg.resize(jpeg.size() / 2);  // "premature end of JPEG file"
      BC_RETURN_IF_ERROR(writer->Append(jpeg, i % spec.classes, spec.width, spec.height,
                                        batchcast::data::ImageEncoding::kJpeg));
    }
    return writer->Finish();
  };
  batchcast::Status st = run();
  if (!st.ok()) {
    std::fprintf(stderr, "conformance_dataset: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
