// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/dataset_inspect.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace batchcast::data {
namespace {

constexpr int64_t kScanBlock = 1024;

struct XxhDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

void PutLe64(uint64_t v, uint8_t out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(v >> (8 * i));
}

SizeStats Stats(std::vector<int> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

}  // namespace

namespace {

// Reads samples [first, first + count) into *block. Verifying, a block that cannot be read
// as a whole is read sample by sample, and each sample that cannot be read is listed in
// *bad (its bytes left empty), so one bad sample does not hide the others.
Status ReadBlock(const DatasetReader& reader, int64_t first, int64_t count,
                 std::vector<std::vector<uint8_t>>* block, std::vector<BadSample>* bad) {
  Status st = reader.ReadSamples(first, count, block);
  if (st.ok() || bad == nullptr) return st;
  block->assign(size_t(count), {});
  for (int64_t i = 0; i < count; ++i) {
    Status one = reader.ReadSample(first + i, &(*block)[size_t(i)]);
    if (!one.ok()) {
      bad->push_back({first + i, one.message()});
      (*block)[size_t(i)].clear();
    }
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> DatasetChecksum(const DatasetReader& reader, int64_t* stored_bytes,
                                 std::vector<BadSample>* bad) {
  std::unique_ptr<XXH3_state_t, XxhDeleter> state(XXH3_createState());
  if (!state || XXH3_64bits_reset(state.get()) == XXH_ERROR)
    return InternalError("checksum: cannot create an xxh3 state");
  const int64_t n = reader.info().num_samples;
  int64_t total = 0;
  std::vector<std::vector<uint8_t>> block;
  for (int64_t first = 0; first < n; first += kScanBlock) {
    const int64_t count = std::min(kScanBlock, n - first);
    const size_t unreadable = bad ? bad->size() : 0;
    BC_RETURN_IF_ERROR(ReadBlock(reader, first, count, &block, bad));
    for (int64_t i = 0; i < count; ++i) {
      const auto& bytes = block[size_t(i)];
      if (bad != nullptr) {
        const bool read = std::none_of(bad->begin() + long(unreadable), bad->end(),
                                       [&](const BadSample& b) { return b.index == first + i; });
        Status v = read ? reader.VerifySample(first + i, bytes) : Status::Ok();
        if (!v.ok()) bad->push_back({first + i, v.message()});
      }
      uint8_t head[16];
      PutLe64(uint64_t(reader.Label(first + i)), head);
      PutLe64(uint64_t(bytes.size()), head + 8);
      XXH3_64bits_update(state.get(), head, sizeof(head));
      XXH3_64bits_update(state.get(), bytes.data(), bytes.size());
      total += int64_t(bytes.size());
    }
  }
  if (stored_bytes) *stored_bytes = total;
  return uint64_t(XXH3_64bits_digest(state.get()));
}

std::string FormatChecksum(uint64_t checksum) { return fmt::format("{:016x}", checksum); }

Result<DatasetSummary> InspectDataset(const std::string& path, bool verify) {
  BC_ASSIGN_OR_RETURN(auto reader, DatasetReader::Open(path));
  DatasetSummary s;
  s.info = reader->info();
  const int64_t n = s.info.num_samples;
  s.class_counts.assign(s.info.class_names.size(), 0);
  std::vector<int> widths(static_cast<size_t>(n)), heights(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ++s.class_counts[size_t(reader->Label(i))];
    widths[size_t(i)] = reader->OriginalWidth(i);
    heights[size_t(i)] = reader->OriginalHeight(i);
  }
  s.width = Stats(std::move(widths));
  s.height = Stats(std::move(heights));
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) s.file_bytes = int64_t(st.st_size);
  BC_ASSIGN_OR_RETURN(s.checksum, DatasetChecksum(*reader, &s.stored_bytes,
                                                  verify ? &s.bad_samples : nullptr));
  s.verified = verify;
  std::sort(s.bad_samples.begin(), s.bad_samples.end(),
            [](const BadSample& a, const BadSample& b) { return a.index < b.index; });
  return s;
}

std::string SummaryToJson(const DatasetSummary& s) {
  nlohmann::ordered_json classes = nlohmann::ordered_json::array();
  for (size_t i = 0; i < s.class_counts.size(); ++i)
    classes.push_back({{"label", i}, {"name", s.info.class_names[i]}, {"count", s.class_counts[i]}});
  auto stats = [](const SizeStats& v) {
    return nlohmann::ordered_json{{"min", v.min}, {"median", v.median}, {"max", v.max}};
  };
  nlohmann::ordered_json j = {
      {"path", s.info.path},
      {"schema_version", s.info.schema_version},
      {"kind", s.info.kind == SampleKind::kRaw      ? "raw"
               : s.info.kind == SampleKind::kPixels ? "pixels"
                                                    : "encoded"},
      {"encoding", s.info.encoding},
      {"layout_version", s.info.schema_version},
      {"read_path", std::string(ReadPathName(s.info.read_path))},
      {"compression", s.info.compression},
      {"num_samples", s.info.num_samples},
      {"num_classes", s.info.class_names.size()},
      {"classes", classes},
      {"width", stats(s.width)},
      {"height", stats(s.height)},
      {"file_bytes", s.file_bytes},
      {"stored_bytes", s.stored_bytes},
      {"checksum", FormatChecksum(s.checksum)},
      {"checksum_algorithm", "xxh3-64 over (label le64, length le64, bytes) per sample"},
  };
  j["sample_checksums"] = s.info.has_checksums;
  if (!s.info.store.empty()) j["store"] = s.info.store;
  if (s.verified) {
    nlohmann::ordered_json bad = nlohmann::ordered_json::array();
    for (const BadSample& b : s.bad_samples) bad.push_back({{"index", b.index}, {"cause", b.cause}});
    j["verified"] = true;
    j["bad_samples"] = bad;
  }
  if (s.info.kind == SampleKind::kRaw)
    j["raw_shape"] = {s.info.raw_height, s.info.raw_width, s.info.raw_channels};
  return j.dump(2);
}

}  // namespace batchcast::data
