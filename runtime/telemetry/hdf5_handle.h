// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// One HDF5 identifier, closed with its matching H5?close: the telemetry writer and reader
// (hdf5_sink.cc, hdf5_reader.cc). Callers hold Hdf5Lock() around every HDF5 call.
#pragma once

#include <hdf5.h>

namespace batchcast::telemetry {

class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() {
    if (id_ >= 0) close_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

}  // namespace batchcast::telemetry
