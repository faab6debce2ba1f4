// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The _batchcast extension module: errors, options, DLPack and the bound classes. The
// user-facing API (batchcast.Consumer / Producer / Leader) is the Python package around
// it (bindings/python/batchcast/__init__.py).
#include <dlpack/dlpack.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "bindings/python/src/bindings.h"
#include "core/dtype.h"
#include "core/environment.h"
#include "schedule/resize_schedule.h"
#include "schedule/resize_spec.h"

namespace batchcast::python {
namespace {

// Code -> exception class, filled by batchcast/__init__.py through _set_error_classes.
py::dict& ErrorClasses() {
  static auto* classes = new py::dict();  // intentionally leaked: lives as long as Python
  return *classes;
}

struct ManagedTensor {
  DLManagedTensor dl;
  int64_t shape[4];
  int64_t strides[4];
  std::shared_ptr<void> keep;
};

void DeleteManaged(DLManagedTensor* t) { delete static_cast<ManagedTensor*>(t->manager_ctx); }

void CapsuleDestructor(PyObject* capsule) {
  // Renamed to "used_dltensor" once a consumer took ownership; only unused ones are ours.
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (t && t->deleter) t->deleter(t);
}

// DLPack 0.6 (torch 1.13) has no bool: bool tensors leave as uint8 (batchcast.Consumer views
// them back as bool without a copy).
DLDataType ToDL(DType t) {
  const core::DTypeInfo* i = core::DTypeInfoOf(static_cast<uint32_t>(t));
  return i ? DLDataType{i->dl_code, i->dl_bits, 1} : DLDataType{kDLUInt, 8, 1};
}

size_t ItemSize(DType t) {
  const core::DTypeInfo* i = core::DTypeInfoOf(static_cast<uint32_t>(t));
  return i ? i->bytes : 1;
}

}  // namespace

void RegisterErrors(py::module_& m) {
  m.def("_set_error_classes", [](py::dict classes) {
    ErrorClasses().clear();
    for (auto kv : classes) ErrorClasses()[kv.first] = kv.second;
  });
  m.def("_status_code_names", [] {
    py::list names;
    for (int c = int(StatusCode::kOk); c <= int(StatusCode::kInternal); ++c)
      names.append(StatusCodeName(static_cast<StatusCode>(c)));
    return names;
  });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::str name(StatusCodeName(e.code()));
      PyObject* cls = ErrorClasses().contains(name) ? ErrorClasses()[name].ptr()
                                                     : PyExc_RuntimeError;
      PyErr_SetString(cls, e.what());
    }
  });
}

Options OptionsFromKwargs(const py::dict& kwargs) {
  Options o = ValueOrThrow(ResolveOptions({}));
  for (auto kv : kwargs) {
    if (kv.second.is_none()) continue;
    std::string key = py::str(kv.first);
    std::string value;
    if (py::isinstance<py::bool_>(kv.second)) value = kv.second.cast<bool>() ? "true" : "false";
    else value = py::str(kv.second);
    ThrowIfError(SetOption(&o, key, value));
  }
  ThrowIfError(ValidateOptions(o));
  return o;
}

py::capsule MakeDLPackCapsule(const TensorView& view, std::shared_ptr<void> keep) {
  auto* m = new ManagedTensor();
  m->keep = std::move(keep);
  int64_t stride = 1;
  for (int i = view.ndim - 1; i >= 0; --i) {
    m->shape[i] = view.shape[i];
    m->strides[i] = stride;
    stride *= view.shape[i];
  }
  DLTensor& t = m->dl.dl_tensor;
  t.data = view.data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = view.ndim;
  t.dtype = ToDL(view.dtype);
  t.shape = m->shape;
  t.strides = m->strides;
  t.byte_offset = 0;
  m->dl.manager_ctx = m;
  m->dl.deleter = DeleteManaged;
  PyObject* cap = PyCapsule_New(&m->dl, "dltensor", CapsuleDestructor);
  if (cap == nullptr) {
    delete m;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

namespace {

py::dtype NumpyDType(DType t) {
  const core::DTypeInfo* i = core::DTypeInfoOf(static_cast<uint32_t>(t));
  if (i == nullptr) return py::dtype::of<uint8_t>();
  // numpy has no bfloat16: its bytes leave as int16 (torch views them back).
  return py::dtype(t == DType::kBFloat16 ? std::string("int16") : std::string(i->name));
}

}  // namespace

py::array MakeNumpyView(const TensorView& view, std::shared_ptr<void> keep) {
  std::vector<py::ssize_t> shape(view.shape, view.shape + view.ndim);
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t s = static_cast<py::ssize_t>(ItemSize(view.dtype));
  for (int i = view.ndim - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  auto* holder = new std::shared_ptr<void>(std::move(keep));
  py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  py::array a(NumpyDType(view.dtype), shape, strides, view.data, base);
  // Every trainer on the node reads these bytes: numpy refuses writes ("assignment
  // destination is read-only"), and so do views derived from this one.
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

py::array MakeNumpyArray(const TensorView& view) {
  std::vector<py::ssize_t> shape(view.shape, view.shape + view.ndim);
  return py::array(NumpyDType(view.dtype), shape);
}

TensorView IdsView(const int64_t* ids, int64_t n) {
  TensorView v;
  v.data = const_cast<int64_t*>(ids);
  v.dtype = DType::kInt64;
  v.ndim = 1;
  v.shape[0] = n;
  v.nbytes = size_t(n) * sizeof(int64_t);
  return v;
}

}  // namespace batchcast::python

namespace {

// pybind11 before 2.12 reads numpy's array descriptors with numpy 1's layout, which numpy 2
// changed: an extension built with it (Debian's pybind11-dev 2.10) gives wrong item sizes
// under numpy 2. Refuse to load there, saying how to build one that works with both.
void CheckNumpyAbi() {
#if PYBIND11_VERSION_MAJOR < 2 || (PYBIND11_VERSION_MAJOR == 2 && PYBIND11_VERSION_MINOR < 12)
  namespace py = pybind11;
  const std::string version =
      py::module_::import("numpy").attr("__version__").cast<std::string>();
  if (std::atoi(version.c_str()) >= 2)
    throw py::import_error(
        "batchcast: this _batchcast was built with pybind11 " PYBIND11_TOSTRING(
            PYBIND11_VERSION_MAJOR) "." PYBIND11_TOSTRING(PYBIND11_VERSION_MINOR) ", which "
        "supports numpy 1 only, and numpy " + version + " is installed; rebuild it with pybind11 "
        ">= 2.12 (pip install . does: pyproject.toml asks for it; a CMake build: "
        "-Dpybind11_DIR=$(python3 -m pybind11 --cmakedir) after pip install 'pybind11>=2.12'), "
        "or use numpy < 2");
#endif
}

}  // namespace

PYBIND11_MODULE(_batchcast, m) {
  using namespace batchcast::python;
  m.doc() = "Batchcast data plane (see the batchcast package for the documented API)";
  CheckNumpyAbi();
  RegisterErrors(m);
  m.def("resolve_options", [](py::dict kwargs) {
    batchcast::Options o = OptionsFromKwargs(kwargs);
    return batchcast::OptionsToJson(o);
  }, "The resolved options registry as JSON (defaults < file < environment < arguments).");
  // The launcher's environment, read as every other front door reads it (core/environment.h).
  m.def("_launcher_rank", &batchcast::env::LauncherRank,
        "This process's rank from its launcher (RANK, OMPI_COMM_WORLD_RANK, ...); -1 if none.");
  m.def("_leader_address", &batchcast::env::LeaderAddress,
        "BATCHCAST_ADDRESS (or BATCHCAST_SOCKET); None when unset.");
  // What a leader's progressive-resizing schedule trains (docs/progressive-resizing.md),
  // rebuilt from its inputs: tests and tools check a stream against it.
  m.def("_resize_plan", [](const std::string& spec_text, uint64_t seed, int64_t num_samples,
                           int epochs, int64_t consumer_batch) {
    namespace sc = batchcast::schedule;
    auto spec = sc::ParseResizeSpec(spec_text);
    ThrowIfError(spec.status());
    sc::ResizeScheduleParams params;
    params.spec = *spec;
    params.seed = seed;
    params.num_samples = num_samples;
    params.total_epochs = epochs;
    params.base_batch_size = consumer_batch;
    auto s = sc::ResizeSchedule::Create(params);
    ThrowIfError(s.status());
    py::list per_epoch;
    for (int e = 0; e < epochs; ++e) {
      auto plan = (*s)->PlanEpoch(e);
      ThrowIfError(plan.status());
      py::dict sizes;
      for (int b = 0; b < (*s)->num_buckets(); ++b)
        for (int64_t id : plan->buckets[b].samples) sizes[py::int_(id)] = (*s)->bucket_sizes()[b];
      per_epoch.append(sizes);
    }
    py::dict batch, lr;
    for (int b = 0; b < (*s)->num_buckets(); ++b) {
      batch[py::int_((*s)->bucket_sizes()[b])] = (*s)->ScaledBatchSize(consumer_batch, b);
      lr[py::int_((*s)->bucket_sizes()[b])] = (*s)->LrFactor(consumer_batch, b);
    }
    py::dict out;
    out["epochs"] = per_epoch;
    out["batch"] = batch;
    out["lr"] = lr;
    return out;
  }, "A resize schedule's plan: per epoch {sample: image size}, per size the scaled batch "
     "and LR factor of a consumer of full-size batch consumer_batch.");
  m.attr("DLPACK_VERSION") = DLPACK_VERSION;
  BindConsumer(m);
  BindProducer(m);
  BindLeader(m);
}
