// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/hdf5_util.h"

#include <mutex>
#include <vector>

#include "core/errors.h"
#include "data/hdf5_lock.h"

namespace batchcast::data {

void H5Id::Reset() {
  if (id_ < 0) return;
  if (H5Iis_valid(id_) > 0 && H5Idec_ref(id_) < 0) H5Eclear2(H5E_DEFAULT);
  id_ = H5I_INVALID_HID;
}

void Hdf5Init() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::lock_guard lock(Hdf5Lock());
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

namespace {

herr_t CollectMessage(unsigned n, const H5E_error2_t* err, void* data) {
  auto* msgs = static_cast<std::vector<std::string>*>(data);
  if (err->desc != nullptr && err->desc[0] != '\0') msgs->emplace_back(err->desc);
  return 0;
}

}  // namespace

Status Hdf5Error(StatusCode code, const std::string& what) {
  std::vector<std::string> msgs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, CollectMessage, &msgs);
  H5Eclear2(H5E_DEFAULT);
  std::string detail = msgs.empty() ? "unknown HDF5 error" : msgs.front();
  return MakeError(code, "hdf5: {}: {}", what, detail);
}

Status CheckFilterAvailable(int id, const std::string& what) {
  if (H5Zfilter_avail(static_cast<H5Z_filter_t>(id)) > 0) return Status::Ok();
  H5Eclear2(H5E_DEFAULT);
  const char* name = id == kLz4FilterId ? "lz4" : "an unknown filter";
  return MakeError(StatusCode::kFailedPrecondition,
                   "hdf5: {} needs the HDF5 filter {} ({}), which this HDF5 cannot load: install "
                   "the Debian package hdf5-filter-plugin (scripts/deps.sh installs it), or set "
                   "HDF5_PLUGIN_PATH to the directory of the filter's plugin",
                   what, id, name);
}

std::string DescribeType(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
      return fmt::format("{}int{}", is_signed ? "" : "u", 8 * H5Tget_size(type));
    }
    case H5T_FLOAT: return fmt::format("float{}", 8 * H5Tget_size(type));
    case H5T_STRING: return "string";
    case H5T_VLEN: {
      H5Id base(H5Tget_super(type));
      return "vlen " + (base.valid() ? DescribeType(base.get()) : std::string("?"));
    }
    case H5T_COMPOUND: return "compound";
    case H5T_ARRAY: return "array";
    case H5T_ENUM: return "enum";
    case H5T_OPAQUE: return "opaque";
    default: return "unsupported type";
  }
}

bool HasAttribute(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

Status WriteIntAttribute(hid_t obj, const char* name, int64_t value) {
  H5Id space(H5Screate(H5S_SCALAR));
  H5Id attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) < 0)
    return Hdf5Error(StatusCode::kIoError, fmt::format("cannot write attribute '{}'", name));
  return Status::Ok();
}

Status WriteStringAttribute(hid_t obj, const char* name, const std::string& value) {
  H5Id space(H5Screate(H5S_SCALAR));
  H5Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), value.empty() ? 1 : value.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  H5Id attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid() || H5Awrite(attr.get(), type.get(), value.data()) < 0)
    return Hdf5Error(StatusCode::kIoError, fmt::format("cannot write attribute '{}'", name));
  return Status::Ok();
}

Result<int64_t> ReadIntAttribute(hid_t obj, const char* name, const std::string& where) {
  H5Id attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!attr.valid())
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot open attribute '{}' in {}", name, where));
  H5Id type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    return CorruptDataError("hdf5: attribute '{}' in {} has type {}, expected an integer", name,
                            where, DescribeType(type.get()));
  H5Id space(H5Aget_space(attr.get()));
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    return CorruptDataError("hdf5: attribute '{}' in {} is not a single value", name, where);
  int64_t value = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &value) < 0)
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot read attribute '{}' in {}", name, where));
  return value;
}

Result<std::string> ReadStringAttribute(hid_t obj, const char* name, const std::string& where) {
  H5Id attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!attr.valid())
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot open attribute '{}' in {}", name, where));
  H5Id type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_STRING)
    return CorruptDataError("hdf5: attribute '{}' in {} has type {}, expected a string", name,
                            where, DescribeType(type.get()));
  if (H5Tis_variable_str(type.get()) > 0) {
    char* text = nullptr;
    H5Id mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    // h5py writes UTF-8; HDF5 has no ASCII <-> UTF-8 conversion ("no appropriate function
    // for conversion path"), so read in the stored character set.
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    if (H5Aread(attr.get(), mem.get(), &text) < 0 || text == nullptr)
      return Hdf5Error(StatusCode::kCorruptData,
                       fmt::format("cannot read attribute '{}' in {}", name, where));
    std::string out(text);
    H5free_memory(text);
    return out;
  }
  std::string out(H5Tget_size(type.get()), '\0');
  if (H5Aread(attr.get(), type.get(), out.data()) < 0)
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot read attribute '{}' in {}", name, where));
  out.resize(out.find_first_of('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

}  // namespace batchcast::data
