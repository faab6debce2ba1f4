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
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "batchcast/batch.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "producer/feed.h"
#include "producer/process_telemetry.h"
#include "producer/producer.h"
#include "producer/slot_layout.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "telemetry/run_outputs.h"

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

// In a forked child (a DataLoader worker, multiprocessing) the bound objects of the parent
// must not be torn down: their threads do not exist there, and stopping a leader or
// detaching a consumer would act on the shared stream in the parent's name. Their
// destructors hand what they own to this, which leaves it to the process exit.
template <typename T>
void AbandonInForkedChild(T& owned) {
  new T(std::move(owned));  // intentionally leaked
}

// Options from the registry (defaults < config file < BATCHCAST_* environment), then the
// keyword arguments (key = registry key; None values are skipped), then validated.
Options OptionsFromKwargs(const py::dict& kwargs);

// Calls `step(timeout_ms)` with the GIL released until it returns true, checking for
// Python signals (KeyboardInterrupt) between bounded chunks of `chunk_ms`. Throws
// py::error_already_set when a signal handler raised.
//
// The GIL is taken back with PyEval_RestoreThread directly, not by a gil_scoped_release
// destructor: when the interpreter finalizes while a daemon thread waits here, that call
// ends the thread with pthread_exit, whose forced unwind must not pass a noexcept
// destructor (that is std::terminate: the interpreter aborted at exit with code 134).
// `step` must not throw.
// Runs `f` (which must not throw) with the GIL released, restoring it without a noexcept
// destructor (see WaitInterruptibly).
template <typename F>
auto WithoutGil(F&& f) {
  PyThreadState* ts = PyEval_SaveThread();
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    PyEval_RestoreThread(ts);
  } else {
    auto r = f();
    PyEval_RestoreThread(ts);
    return r;
  }
}

template <typename Step>
void WaitInterruptibly(Step&& step, int64_t chunk_ms = 100) {
  for (;;) {
    bool done = WithoutGil([&] { return step(chunk_ms); });
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

// The telemetry of a Python front door is producer::ProcessTelemetry (the Leader's and the
// Producer's through their producer::Producer; a Consumer's directly): its sink paths may
// name the process with %r (rank), %p (pid) and %h (host), or a run directory (dir:RUN) names
// the file by the one rule (telemetry/run_outputs.h); Finish() writes them with the
// end-of-run summary for this process alone (no MPI).
using producer::ProcessTelemetry;

// Named tensors (tensor_binding.cc). A Producer's tensor specs: [(name, dtype name, per-sample
// shape[, values budget])] (a variable-length one: -1 first in its shape, and the budget);
// its batch's arrays (in spec order; a variable-length one as a list of per-sample arrays or
// (values, offsets)) copied into the slot's tensors for n samples.
std::vector<producer::TensorSpec> TensorSpecsFromPython(const py::list& specs);
void CopyNamedTensors(const py::list& arrays, const std::vector<producer::TensorSpec>& specs,
                      const producer::ExternalSlot& slot, int64_t n);
// A batch's named tensors as {name: (make(view), dtype name)} (a variable-length one:
// (make(values), dtype name, make(offsets))), None when it has none; or as new numpy arrays,
// with the (destination, view) copies still to do (without the GIL).
// make(view, keep): a capsule or numpy view of `view` kept alive by `keep` (null: the batch's).
using MakeView = std::function<py::object(const TensorView&, std::shared_ptr<void>)>;
py::object NamedTensors(const Batch& b, const MakeView& make);
py::object NamedTensorCopies(const Batch& b, std::vector<std::pair<void*, TensorView>>* copies);

// Everything a Producer knows, as a dict: the slot writer's counters, late joins and replays,
// every consumer entry in use, the telemetry summary once written (producer_binding.cc).
py::dict ProducerStatsDict(producer::Producer& p);

void BindConsumer(py::module_& m);
void BindProducer(py::module_& m);
void BindLeader(py::module_& m);

}  // namespace batchcast::python
