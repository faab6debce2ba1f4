// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The HDF5 support every module that writes or reads HDF5 uses (the dataset reader and
// writer in data/, the telemetry sink): an owning id handle, the one place where the HDF5
// error stack becomes a Status, type names, scalar attributes and 1-D datasets. It lives in
// core because data and telemetry may not include each other. The data module's own HDF5
// code (the superblock check, filters) is in data/hdf5_util.h, which re-exports these names
// as batchcast::data::*.
//
// Every function here expects the caller to hold Hdf5Lock() (core/hdf5_lock.h), except
// Hdf5Init, which takes it.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>

#include "batchcast/status.h"

namespace batchcast {

// Owns one HDF5 identifier (file, group, dataset, dataspace, type, plist, attribute).
// Like every HDF5 call, destruction and Reset() need Hdf5Lock() held by the caller
// (declare the handle after the lock_guard so it dies first); it never throws.
class H5Id {
 public:
  H5Id() = default;
  explicit H5Id(hid_t id) : id_(id) {}
  ~H5Id() { Reset(); }
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      Reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void Reset();
  // Gives up ownership without closing.
  hid_t Release() { return std::exchange(id_, H5I_INVALID_HID); }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Turns HDF5's error printing off (once per process; takes Hdf5Lock()): errors are reported
// as Status instead. Call it before the first HDF5 call sequence.
void Hdf5Init();

// "hdf5: <what>: <innermost HDF5 message>" and clears the HDF5 error stack.
Status Hdf5Error(StatusCode code, const std::string& what);

// A readable name for a stored type: "uint8", "int64", "float32", "vlen uint8", "string".
std::string DescribeType(hid_t type);

// How a string attribute is stored: fixed length, null padded (the dataset layout), or
// variable length (the telemetry file; h5py reads it as str). Both UTF-8.
enum class Hdf5String { kFixed, kVariable };

bool HasAttribute(hid_t obj, const char* name);
// Scalar attributes; an error names the attribute (callers add the file).
Status WriteIntAttribute(hid_t obj, const char* name, int64_t value);
Status WriteDoubleAttribute(hid_t obj, const char* name, double value);
Status WriteStringAttribute(hid_t obj, const char* name, const std::string& value,
                            Hdf5String form = Hdf5String::kFixed);
// Reads an integer attribute of any integer type; the error names `where` (file path).
Result<int64_t> ReadIntAttribute(hid_t obj, const char* name, const std::string& where);
// Reads a fixed or variable length string attribute; the error names `where`.
Result<std::string> ReadStringAttribute(hid_t obj, const char* name, const std::string& where);

// Creates the 1-D dataset `name` of `n` elements of `file_type` in `loc` and writes `data`
// (in `mem_type`) to it; the error names the dataset and `where` (the file).
Status WriteDataset1D(hid_t loc, const char* name, hid_t file_type, hid_t mem_type,
                      const void* data, hsize_t n, const std::string& where);

}  // namespace batchcast
