// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// An in-memory DatasetReader for pipeline tests and benchmarks: encoded samples (JPEG/PNG
// bytes, or anything else to provoke errors) or raw H x W x C pixels, with an optional
// injected read failure and optional offline resize buckets.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset_reader.h"

namespace batchcast::testing {

class MemoryReader : public data::DatasetReader {
 public:
  static std::shared_ptr<MemoryReader> Encoded(std::vector<std::vector<uint8_t>> samples,
                                               std::string path = "mem://encoded") {
    auto r = std::make_shared<MemoryReader>(std::move(samples), std::move(path));
    r->info_.kind = data::SampleKind::kEncoded;
    r->info_.encoding = "mixed";
    return r;
  }
  static std::shared_ptr<MemoryReader> Raw(int height, int width, int channels,
                                           std::vector<std::vector<uint8_t>> samples,
                                           std::string path = "mem://raw") {
    auto r = std::make_shared<MemoryReader>(std::move(samples), std::move(path));
    r->info_.kind = data::SampleKind::kRaw;
    r->info_.encoding = "raw";
    r->info_.raw_height = height;
    r->info_.raw_width = width;
    r->info_.raw_channels = channels;
    return r;
  }

  MemoryReader(std::vector<std::vector<uint8_t>> samples, std::string path)
      : samples_(std::move(samples)) {
    info_.path = std::move(path);
    info_.schema_version = 1;
    info_.num_samples = static_cast<int64_t>(samples_.size());
  }

  // Offline buckets (docs/progressive-resizing.md): bucket_samples[b][i] is sample i stored at
  // sizes[b] (encoded).
  void SetBuckets(std::vector<int> sizes, std::vector<std::vector<std::vector<uint8_t>>> samples) {
    info_.bucket_sizes = std::move(sizes);
    buckets_ = std::move(samples);
  }
  Status ReadBucketSample(int size, int64_t index, std::vector<uint8_t>* out) const override {
    for (size_t b = 0; b < info_.bucket_sizes.size(); ++b) {
      if (info_.bucket_sizes[b] != size) continue;
      out->assign(buckets_[b][size_t(index)].begin(), buckets_[b][size_t(index)].end());
      return Status::Ok();
    }
    return Status(StatusCode::kNotFound, fmt::format("memory reader: no bucket {}", size));
  }

  // ReadSample(index) fails from now on (an I/O error the pipeline must report).
  void FailRead(int64_t index) { fail_index_ = index; }
  // Stores a checksum per sample, as converted files do (VerifySample then checks it).
  void StoreChecksums() {
    checksums_.clear();
    for (size_t i = 0; i < samples_.size(); ++i)
      checksums_.push_back(data::SampleChecksum(samples_[i], Label(int64_t(i))));
    info_.has_checksums = true;
  }
  Status VerifySample(int64_t index, std::span<const uint8_t> bytes) const override {
    if (checksums_.empty() || data::SampleChecksum(bytes, Label(index)) == checksums_[size_t(index)])
      return Status::Ok();
    return Status(StatusCode::kCorruptData,
                  fmt::format("memory reader: sample {} fails its checksum", index));
  }

  const data::DatasetInfo& info() const override { return info_; }
  int64_t Label(int64_t index) const override { return 1000 + index; }
  int OriginalWidth(int64_t) const override { return info_.raw_width; }
  int OriginalHeight(int64_t) const override { return info_.raw_height; }
  Status ReadSample(int64_t index, std::vector<uint8_t>* out) const override {
    if (index == fail_index_)
      return Status(StatusCode::kIoError,
                    fmt::format("memory reader: sample {} cannot be read (injected)", index));
    out->assign(samples_[index].begin(), samples_[index].end());
    return Status::Ok();
  }

 private:
  std::vector<std::vector<uint8_t>> samples_;
  std::vector<std::vector<std::vector<uint8_t>>> buckets_;
  std::vector<uint64_t> checksums_;
  data::DatasetInfo info_;
  int64_t fail_index_ = -1;
};

}  // namespace batchcast::testing
