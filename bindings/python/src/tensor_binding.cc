// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Named tensors across the Python boundary (docs/data-plane.md "Named tensors"): a Producer's
// dict batches into the slot's named tensors, and a batch's named tensors out to Python as a
// dict of DLPack capsules or numpy arrays with their dtype names.
#include <cstring>

#include "bindings/python/src/bindings.h"
#include "core/dtype.h"

namespace batchcast::python {
namespace {

[[noreturn]] void Refuse(const std::string& message) {
  throw StatusError(Status(StatusCode::kInvalidArgument, message));
}

}  // namespace

std::vector<producer::TensorSpec> TensorSpecsFromPython(const py::list& specs) {
  std::vector<producer::TensorSpec> out;
  for (const py::handle& item : specs) {
    auto t = item.cast<py::tuple>();
    if (t.size() != 3) Refuse("producer: a tensor spec is (name, dtype, per-sample shape)");
    producer::TensorSpec s;
    s.name = t[0].cast<std::string>();
    const std::string dtype = t[1].cast<std::string>();
    const core::DTypeInfo* info = core::DTypeNamed(dtype);
    if (info == nullptr)
      Refuse("producer: tensor '" + s.name + "' has dtype " + dtype + "; use one of " +
             core::DTypeNames() + " (convert it first)");
    s.dtype = info->code;
    for (const py::handle& d : t[2].cast<py::tuple>()) s.shape.push_back(d.cast<int64_t>());
    out.push_back(std::move(s));
  }
  return out;
}

void CopyNamedTensors(const py::list& arrays, const std::vector<producer::TensorSpec>& specs,
                      const std::vector<uint8_t*>& slot, int64_t n) {
  if (arrays.size() != specs.size())
    Refuse("producer: a batch with " + std::to_string(arrays.size()) + " named tensors; every "
           "batch must have the first batch's " + std::to_string(specs.size()));
  for (size_t t = 0; t < specs.size(); ++t) {
    auto a = py::array::ensure(arrays[t], py::array::c_style);
    if (!a) throw py::error_already_set();
    const uint64_t per = specs[t].sample_bytes();
    if (a.ndim() < 1 || a.shape(0) != n || uint64_t(a.nbytes()) != uint64_t(n) * per ||
        a.itemsize() != core::DTypeInfoOf(specs[t].dtype)->bytes)
      Refuse("producer: tensor '" + specs[t].name + "' has " + std::to_string(a.nbytes()) +
             " bytes in " + std::to_string(a.ndim()) + " dimensions for " + std::to_string(n) +
             " samples, expected " + std::to_string(per) + " bytes per sample; every batch must "
             "have the first batch's per-sample shape and dtype");
    const void* src = a.data();
    py::gil_scoped_release nogil;
    std::memcpy(slot[t], src, size_t(n) * per);
  }
}

py::object NamedTensors(const Batch& b, const std::function<py::object(const TensorView&)>& make) {
  if (b.num_tensors() == 0) return py::none();
  py::dict out;
  for (int i = 0; i < b.num_tensors(); ++i) {
    const TensorView v = b.tensor(b.tensor_name(i));
    const core::DTypeInfo* info = core::DTypeInfoOf(static_cast<uint32_t>(v.dtype));
    out[py::str(b.tensor_name(i))] = py::make_tuple(make(v), info ? info->name : "uint8");
  }
  return out;
}

py::object NamedTensorCopies(const Batch& b, std::vector<std::pair<void*, TensorView>>* copies) {
  if (b.num_tensors() == 0) return py::none();
  py::dict out;
  for (int i = 0; i < b.num_tensors(); ++i) {
    const TensorView v = b.tensor(b.tensor_name(i));
    py::array a = MakeNumpyArray(v);
    copies->push_back({a.mutable_data(), v});
    const core::DTypeInfo* info = core::DTypeInfoOf(static_cast<uint32_t>(v.dtype));
    out[py::str(b.tensor_name(i))] = py::make_tuple(a, info ? info->name : "uint8");
  }
  return out;
}

}  // namespace batchcast::python
