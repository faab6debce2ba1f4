// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast inspect FILE [--json]`: what a user needs to trust a dataset file.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "data/dataset_inspect.h"

namespace batchcast::cli {
namespace {

void PrintText(const data::DatasetSummary& s) {
  const auto& i = s.info;
  std::printf("file:            %s\n", i.path.c_str());
  std::printf("schema version:  %d\n", i.schema_version);
  std::printf("layout:          version %d, samples read %s, compression %s\n",
              i.schema_version,
              i.read_path == data::ReadPath::kDirect
                  ? "directly (pread at offsets located at open, no lock)"
              : i.read_path == data::ReadPath::kInflate
                  ? "with pread, gzip chunks inflated once each by zlib (cached), no lock"
              : i.read_path == data::ReadPath::kBlocks
                  ? "through HDF5 once per chunk (compressed chunks, cached)"
                  : "through HDF5 under the process-wide lock, one read per sample (layout "
                    "version 1: `batchcast convert --upgrade FILE` makes it version 2)",
              i.compression.c_str());
  std::printf("samples:         %lld\n", static_cast<long long>(i.num_samples));
  std::printf("storage:         %s, encoding %s\n",
              i.kind == data::SampleKind::kRaw      ? "raw pixels"
              : i.kind == data::SampleKind::kPixels ? "stored pixels of per-sample shapes"
                                                    : "encoded images",
              i.encoding.c_str());
  if (!i.store.empty()) std::printf("stored form:     %s (convert --store)\n", i.store.c_str());
  if (i.kind == data::SampleKind::kRaw)
    std::printf("raw shape:       %d x %d x %d (H x W x C)\n", i.raw_height, i.raw_width,
                i.raw_channels);
  std::printf("width:           min %d, median %d, max %d\n", s.width.min, s.width.median,
              s.width.max);
  std::printf("height:          min %d, median %d, max %d\n", s.height.min, s.height.median,
              s.height.max);
  double ratio = s.stored_bytes > 0 ? double(s.file_bytes) / double(s.stored_bytes) : 0.0;
  std::printf("bytes:           %lld on disk, %lld stored sample bytes (disk/stored %.3f)\n",
              static_cast<long long>(s.file_bytes), static_cast<long long>(s.stored_bytes),
              ratio);
  std::printf("checksum:        %s (xxh3-64 of label, length, bytes per sample)\n",
              data::FormatChecksum(s.checksum).c_str());
  std::printf("sample checksums: %s\n",
              i.has_checksums ? "stored (xxh3-64 of each sample's bytes, seeded with its label)"
                              : "none (written before Batchcast stored them; re-create the file "
                                "with `batchcast convert` to have them)");
  std::printf("classes:         %zu\n", i.class_names.size());
  for (size_t c = 0; c < s.class_counts.size(); ++c)
    std::printf("  %4zu  %-24s %lld\n", c, i.class_names[c].c_str(),
                static_cast<long long>(s.class_counts[c]));
}

// The result of --verify: every bad sample on stderr, then one line; exit status 1 if any.
void PrintVerify(const data::DatasetSummary& s, bool json, int* exit_code) {
  for (const auto& b : s.bad_samples)
    std::fprintf(stderr, "batchcast inspect: sample %lld: %s\n", static_cast<long long>(b.index),
                 b.cause.c_str());
  const auto n = static_cast<long long>(s.info.num_samples);
  FILE* out = json ? stderr : stdout;
  if (!s.bad_samples.empty()) {
    std::fprintf(out, "verify:          %zu of %lld samples are bad (listed above)\n",
                 s.bad_samples.size(), n);
    *exit_code = 1;
  } else if (s.info.has_checksums) {
    std::fprintf(out, "verify:          all %lld samples match their checksums\n", n);
  } else {
    std::fprintf(out, "verify:          all %lld samples read; the file has no sample "
                 "checksums, so changed bytes cannot be found\n", n);
  }
}

}  // namespace

void RegisterInspect(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "inspect", "print counts per class, sizes, encoding, bytes and a content checksum");
  auto path = std::make_shared<std::string>();  // owned by the callbacks that capture it
  auto json = std::make_shared<bool>(false);
  cmd->add_option("file", *path, "dataset file in the Batchcast HDF5 layout")->required();
  auto verify = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "print one JSON object instead of text");
  cmd->add_flag("--verify", *verify,
                "check every sample against its stored checksum and list each that fails or "
                "cannot be read (exit status 1 when any does)");
  cmd->callback([=] {
    auto s = data::InspectDataset(*path, *verify);
    if (!s.ok()) {
      std::fprintf(stderr, "batchcast inspect: %s\n", s.status().message().c_str());
      *exit_code = 1;
      return;
    }
    if (*json) std::printf("%s\n", data::SummaryToJson(*s).c_str());
    else PrintText(*s);
    if (*verify) PrintVerify(*s, *json, exit_code);
  });
}

}  // namespace batchcast::cli
