// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Shared pieces of the _batchcast extension: Status -> Python exception, options from
// keyword arguments, interruptible waits and DLPack capsules. Nothing here links libtorch:
// tensors leave as DLPack capsules (torch.utils.dlpack.from_dlpack) or numpy arrays.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "batchcast/batch.h"
#include "batchcast/options.h"
#include "batchcast/status.h"

namespace batchcast::python {

namespace py = pybind11;

// A Status on its way to Python: translated to the exception class registered for its
// code (batchcast.<Code>Error), with the C++ message unchanged.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const Status& st) : std::runtime_error(st.message()), code_(st.code()) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

inline void ThrowIfError(const Status& st) {
  if (!st.ok()) throw StatusError(st);
}
template <typename T>
T ValueOrThrow(Result<T> r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}

void RegisterErrors(py::module_& m);

// Options from the registry (defaults < config file < BATCHCAST_* environment), then the
// keyword arguments (key = registry key; None values are skipped), then validated.
Options OptionsFromKwargs(const py::dict& kwargs);

// A unique abstract socket name for a leader or producer in this process.
std::string NewAddress(const char* kind);

// Calls `step(timeout_ms)` with the GIL released until it returns true, checking for
// Python signals (KeyboardInterrupt) between bounded chunks of `chunk_ms`. Throws
// py::error_already_set when a signal handler raised.
template <typename Step>
void WaitInterruptibly(Step&& step, int64_t chunk_ms = 100) {
  for (;;) {
    bool done;
    {
      py::gil_scoped_release nogil;
      done = step(chunk_ms);
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

// A DLPack capsule ("dltensor") viewing `view`; `keep` (may be null) lives until the
// consumer of the capsule (torch) frees the tensor, or the capsule dies unused.
py::capsule MakeDLPackCapsule(const TensorView& view, std::shared_ptr<void> keep);
// The same view as a read-only numpy array whose base object holds `keep`.
py::array MakeNumpyView(const TensorView& view, std::shared_ptr<void> keep);
// A new writable, C-contiguous numpy array of `view`'s dtype and shape (contents unset).
py::array MakeNumpyArray(const TensorView& view);
// A 1-d int64 view of `n` sample ids at `ids`.
TensorView IdsView(const int64_t* ids, int64_t n);

void BindConsumer(py::module_& m);
void BindProducer(py::module_& m);
void BindLeader(py::module_& m);

}  // namespace batchcast::python
