// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/hdf5_util.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/errors.h"
#include "core/hdf5_lock.h"

namespace batchcast {

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

namespace {

// Creates scalar attribute `name` of `file_type` on `obj` and writes `value` (in mem_type).
Status WriteScalarAttribute(hid_t obj, const char* name, hid_t file_type, hid_t mem_type,
                            const void* value) {
  H5Id space(H5Screate(H5S_SCALAR));
  H5Id attr(space.valid() ? H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT)
                          : H5I_INVALID_HID);
  if (!attr.valid() || H5Awrite(attr.get(), mem_type, value) < 0)
    return Hdf5Error(StatusCode::kIoError, fmt::format("cannot write attribute '{}'", name));
  return Status::Ok();
}

// An attribute opened for reading, with its stored type.
struct OpenedAttribute {
  H5Id attr, type;
};

// Opens attribute `name` of `obj` and checks that its type is of class `want` (described as
// `expected` in the error, which names `where`).
Result<OpenedAttribute> OpenAttribute(hid_t obj, const char* name, const std::string& where,
                                      H5T_class_t want, const char* expected) {
  OpenedAttribute a;
  a.attr = H5Id(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a.attr.valid())
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot open attribute '{}' in {}", name, where));
  a.type = H5Id(H5Aget_type(a.attr.get()));
  if (H5Tget_class(a.type.get()) != want)
    return CorruptDataError("hdf5: attribute '{}' in {} has type {}, expected {}", name, where,
                            DescribeType(a.type.get()), expected);
  return a;
}

Status ReadError(const char* name, const std::string& where) {
  return Hdf5Error(StatusCode::kCorruptData,
                   fmt::format("cannot read attribute '{}' in {}", name, where));
}

}  // namespace

Status WriteIntAttribute(hid_t obj, const char* name, int64_t value) {
  return WriteScalarAttribute(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

Status WriteDoubleAttribute(hid_t obj, const char* name, double value) {
  return WriteScalarAttribute(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

Status WriteStringAttribute(hid_t obj, const char* name, const std::string& value,
                            Hdf5String form) {
  H5Id type(H5Tcopy(H5T_C_S1));
  const bool variable = form == Hdf5String::kVariable;
  if (!type.valid() ||
      H5Tset_size(type.get(), variable ? H5T_VARIABLE : std::max<size_t>(value.size(), 1)) < 0 ||
      (!variable && H5Tset_strpad(type.get(), H5T_STR_NULLPAD) < 0) ||
      H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0)
    return Hdf5Error(StatusCode::kIoError,
                     fmt::format("cannot make the type of attribute '{}'", name));
  const char* text = value.c_str();
  return WriteScalarAttribute(obj, name, type.get(), type.get(),
                              variable ? static_cast<const void*>(&text) : value.data());
}

Result<int64_t> ReadIntAttribute(hid_t obj, const char* name, const std::string& where) {
  BC_ASSIGN_OR_RETURN(OpenedAttribute a,
                      OpenAttribute(obj, name, where, H5T_INTEGER, "an integer"));
  H5Id space(H5Aget_space(a.attr.get()));
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    return CorruptDataError("hdf5: attribute '{}' in {} is not a single value", name, where);
  int64_t value = 0;
  if (H5Aread(a.attr.get(), H5T_NATIVE_INT64, &value) < 0) return ReadError(name, where);
  return value;
}

Result<std::string> ReadStringAttribute(hid_t obj, const char* name, const std::string& where) {
  BC_ASSIGN_OR_RETURN(OpenedAttribute a, OpenAttribute(obj, name, where, H5T_STRING, "a string"));
  if (H5Tis_variable_str(a.type.get()) > 0) {
    char* text = nullptr;
    H5Id mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    // h5py writes UTF-8; HDF5 has no ASCII <-> UTF-8 conversion ("no appropriate function
    // for conversion path"), so read in the stored character set.
    H5Tset_cset(mem.get(), H5Tget_cset(a.type.get()));
    if (H5Aread(a.attr.get(), mem.get(), &text) < 0 || text == nullptr)
      return ReadError(name, where);
    std::string out(text);
    H5free_memory(text);
    return out;
  }
  std::string out(H5Tget_size(a.type.get()), '\0');
  if (H5Aread(a.attr.get(), a.type.get(), out.data()) < 0) return ReadError(name, where);
  out.resize(out.find_first_of('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

Status WriteDataset1D(hid_t loc, const char* name, hid_t file_type, hid_t mem_type,
                      const void* data, hsize_t n, const std::string& where) {
  H5Id space(H5Screate_simple(1, &n, nullptr));
  H5Id ds(space.valid()
              ? H5Dcreate2(loc, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
              : H5I_INVALID_HID);
  if (!ds.valid() ||
      (n > 0 && H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0))
    return Hdf5Error(StatusCode::kIoError,
                     fmt::format("cannot write dataset '{}' in {}", name, where));
  return Status::Ok();
}

}  // namespace batchcast
