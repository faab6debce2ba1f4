// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Internal HDF5 helpers for the data module: an owning id handle, the one place where
// the HDF5 error stack becomes a Status, and small attribute/type helpers.
// Every function here expects the caller to hold Hdf5Lock() (data/hdf5_lock.h).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>

#include "batchcast/status.h"

namespace batchcast::data {

// Owns one HDF5 identifier (file, dataset, dataspace, type, plist, attribute).
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

// Turns HDF5 error printing off (once per process); errors are reported as Status.
void Hdf5Init();

// "hdf5: <what>: <innermost HDF5 message>" and clears the HDF5 error stack.
Status Hdf5Error(StatusCode code, const std::string& what);

// Chunk filters `batchcast convert --compression` can write, besides HDF5's own deflate.
inline constexpr int kLz4FilterId = 32004;  // registered HDF5 filter; hdf5-filter-plugin
// Fails when filter `id` can be neither found in HDF5 nor loaded as a plugin (Debian's HDF5
// searches /usr/lib/<triplet>/hdf5/serial/plugins, and HDF5_PLUGIN_PATH): the message names
// the filter, `what` needs it, and the package to install.
Status CheckFilterAvailable(int id, const std::string& what);

// A readable name for a stored type: "uint8", "int64", "float32", "vlen uint8", "string".
std::string DescribeType(hid_t type);

bool HasAttribute(hid_t obj, const char* name);
Status WriteIntAttribute(hid_t obj, const char* name, int64_t value);
Status WriteStringAttribute(hid_t obj, const char* name, const std::string& value);
// Reads an integer attribute of any integer type; the error names `where` (file path).
Result<int64_t> ReadIntAttribute(hid_t obj, const char* name, const std::string& where);
Result<std::string> ReadStringAttribute(hid_t obj, const char* name, const std::string& where);

}  // namespace batchcast::data
