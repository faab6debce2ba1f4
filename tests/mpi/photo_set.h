// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A real-photo JPEG dataset in the Batchcast HDF5 layout, for the MPI tests and the fan-out
// benchmark: image i is a random 4:3 crop (50-100% of the largest such box) of one of the
// photos Debian's python3-skimage ships, mirrored at random, scaled to width x height and
// encoded as a baseline JPEG (4:2:0). The crop parameters are a pure function of i, so the
// set is the same on every run. One sample can be truncated on purpose (a corrupt JPEG
// whose header still parses) to provoke the bad-sample path.
#pragma once

#include <fmt/format.h>

#include <opencv2/imgproc.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "batchcast/status.h"
#include "core/errors.h"
#include "data/dataset_writer.h"
#include "data/image_encode.h"
#include "pipeline/decode.h"
#include "pipeline/sample_rng.h"

namespace batchcast::mpitest {

struct PhotoSetSpec {
  std::string out;             // the .h5 file to write (replaced if it exists)
  int images = 240;
  int width = 64, height = 48;
  int quality = 90;
  int corrupt_index = -1;      // >= 0: this sample is truncated to half its bytes
  int corrupt_from = -1;       // >= 0: this sample and every later one are truncated too
  int classes = 10;            // label = i % classes
};

inline std::vector<std::string> SkimagePhotos() {
  const std::string dir = "/usr/lib/python3/dist-packages/skimage/data/";
  return {dir + "astronaut.png",      dir + "chelsea.png",     dir + "coffee.png",
          dir + "motorcycle_left.png", dir + "motorcycle_right.png", dir + "ihc.png",
          dir + "rocket.jpg",          dir + "retina.jpg",      dir + "hubble_deep_field.jpg"};
}

// The source photos decoded to RGB by the pipeline's own decoder; color photos only.
inline Result<std::vector<pipeline::DecodedImage>> LoadPhotos() {
  auto decoder = pipeline::ImageDecoder::Create();
  if (!decoder.ok()) return decoder.status();
  std::vector<pipeline::DecodedImage> photos;
  for (const auto& path : SkimagePhotos()) {
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    if (bytes.empty()) continue;
    auto header = decoder->ReadHeader(bytes, int64_t(1) << 30);
    if (!header.ok() || header->channels == 1) continue;
    pipeline::DecodedImage img;
    if (!decoder->Decode(bytes, *header, 8, 3, &img).ok()) continue;
    photos.push_back(std::move(img));
  }
  if (photos.size() < 3)
    return NotFoundError(
        "photo set: found {} source photos under /usr/lib/python3/dist-packages/skimage/data, "
        "need 3; install python3-skimage (make deps)",
        photos.size());
  return photos;
}

// The JPEG bytes of image i of the set.
inline Result<std::vector<uint8_t>> MakePhotoJpeg(const pipeline::DecodedImage& photo, int i,
                                                  const PhotoSetSpec& spec) {
  pipeline::SampleRng rng(2024, 0, static_cast<uint64_t>(i), pipeline::RngStream::kCrop);
  const double aspect = double(spec.width) / spec.height;
  int max_w = std::min(photo.width, static_cast<int>(photo.height * aspect));
  int w = std::max(1, static_cast<int>(max_w * rng.Uniform(0.5, 1.0)));
  int h = std::max(1, std::min(photo.height, static_cast<int>(w / aspect)));
  int x = static_cast<int>(rng.UniformInt(0, photo.width - w));
  int y = static_cast<int>(rng.UniformInt(0, photo.height - h));
  cv::Mat src(photo.height, photo.width, CV_8UC3, const_cast<uint8_t*>(photo.data()),
              photo.stride());
  cv::Mat out;
  cv::resize(src(cv::Rect(x, y, w, h)), out, cv::Size(spec.width, spec.height), 0, 0,
             w >= spec.width ? cv::INTER_AREA : cv::INTER_CUBIC);
  if (rng.Bernoulli(0.5)) cv::flip(out, out, 1);
  if (!out.isContinuous()) out = out.clone();
  return data::EncodeJpeg(std::span<const uint8_t>(out.data, out.total() * out.elemSize()),
                          spec.width, spec.height, 3, spec.quality);
}

// Writes the whole set to spec.out (atomically, through DatasetWriter).
inline Status MakePhotoDataset(const PhotoSetSpec& spec) {
  BC_ASSIGN_OR_RETURN(auto photos, LoadPhotos());
  data::DatasetSpec ds;
  ds.kind = data::SampleKind::kEncoded;
  for (int c = 0; c < spec.classes; ++c) ds.class_names.push_back(fmt::format("class{}", c));
  ds.overwrite = true;
  ds.created_by = "batchcast tests/mpi/photo_set.h";
  BC_ASSIGN_OR_RETURN(auto writer, data::DatasetWriter::Create(spec.out, ds));
  for (int i = 0; i < spec.images; ++i) {
    BC_ASSIGN_OR_RETURN(auto jpeg, MakePhotoJpeg(photos[i % photos.size()], i, spec));
    if (i == spec.corrupt_index || (spec.corrupt_from >= 0 && i >= spec.corrupt_from))
      jpeg.resize(jpeg.size() / 2);  // "premature end of JPEG file"
    BC_RETURN_IF_ERROR(writer->Append(jpeg, i % spec.classes, spec.width, spec.height,
                                      data::ImageEncoding::kJpeg));
  }
  return writer->Finish();
}

}  // namespace batchcast::mpitest
