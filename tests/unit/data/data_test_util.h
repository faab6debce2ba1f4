// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Shared helpers of the data tests: temporary directories, file I/O, message checks,
// Fashion-MNIST paths, and a builder of hand-made (possibly broken) layout files through the
// HDF5 C API.
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "data/hdf5_lock.h"

namespace batchcast::data::testing {

inline const char kFashionDir[] = "/usr/share/datasets/fashion-mnist";

inline std::string FashionPath(const std::string& name) {
  return std::string(kFashionDir) + "/" + name;
}

// A fresh directory under the build tree, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    std::string base = std::string(BATCHCAST_BINARY_DIR) + "/test-tmp";
    std::filesystem::create_directories(base);
    std::string tmpl = base + "/data-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A failure (the test goes on) when `text` does not contain `part`; the message shows both.
inline void ExpectContains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// What a hand-made layout file contains; defaults make a valid 4-sample vlen file.
struct LayoutSpec {
  bool schema_attr = true;
  int schema_version = 1;
  bool complete_attr = true;
  std::string images = "vlen";  // vlen | raw | float32 | none
  int num_samples = 4;
  bool labels = true;
  int labels_count = -1;  // -1: num_samples
  bool zero_length_sample = false;  // sample 2 of a vlen file has 0 bytes
};

inline void WriteIntAttr(hid_t obj, const char* name, int64_t v) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Sclose(s);
}

inline void WriteVector(hid_t f, const char* name, hid_t ftype, hid_t mtype, const void* data,
                        hsize_t n) {
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(f, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (n > 0) H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(d);
  H5Sclose(s);
}

inline void WriteImages(hid_t f, const LayoutSpec& spec) {
  const hsize_t n = hsize_t(spec.num_samples);
  if (spec.images == "vlen") {
    std::vector<std::vector<uint8_t>> bytes(n, std::vector<uint8_t>{0x89, 'P', 'N', 'G'});
    if (spec.zero_length_sample) bytes[2].clear();
    std::vector<hvl_t> vl;
    for (auto& b : bytes) vl.push_back({b.size(), b.data()});
    hid_t t = H5Tvlen_create(H5T_NATIVE_UINT8);
    WriteVector(f, "images", t, t, vl.data(), n);
    H5Tclose(t);
  } else if (spec.images == "raw" || spec.images == "float32") {
    hsize_t dims[4] = {n, 2, 2, 1};
    hid_t s = H5Screate_simple(4, dims, nullptr);
    hid_t t = spec.images == "raw" ? H5T_STD_U8LE : H5T_IEEE_F32LE;
    hid_t d = H5Dcreate2(f, "images", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<float> zeros(n * 4, 0.0f);
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data());
    H5Dclose(d);
    H5Sclose(s);
  }
}

// Writes `spec` to `path` with the raw HDF5 API (no Batchcast writer involved).
inline void WriteLayoutFile(const std::string& path, const LayoutSpec& spec) {
  std::lock_guard lock(Hdf5Lock());
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  if (spec.schema_attr) WriteIntAttr(f, "batchcast_schema_version", spec.schema_version);
  if (spec.complete_attr) WriteIntAttr(f, "batchcast_complete", 1);
  WriteImages(f, spec);
  const int nl = spec.labels_count < 0 ? spec.num_samples : spec.labels_count;
  std::vector<int64_t> labels(size_t(nl), 1);
  std::vector<int32_t> sizes(size_t(spec.num_samples), 2);
  if (spec.labels) WriteVector(f, "labels", H5T_STD_I64LE, H5T_NATIVE_INT64, labels.data(), nl);
  WriteVector(f, "widths", H5T_STD_I32LE, H5T_NATIVE_INT32, sizes.data(), sizes.size());
  WriteVector(f, "heights", H5T_STD_I32LE, H5T_NATIVE_INT32, sizes.data(), sizes.size());
  hid_t str = H5Tcopy(H5T_C_S1);
  H5Tset_size(str, H5T_VARIABLE);
  const char* names[] = {"a", "b"};
  WriteVector(f, "class_names", str, str, names, 2);
  H5Tclose(str);
  H5Fclose(f);
}

}  // namespace batchcast::data::testing
