// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Named tensors across the Python boundary (docs/data-plane.md "Named tensors"): a Producer's
// dict batches into the slot's named tensors, and a batch's named tensors out to Python as a
// dict of DLPack capsules or numpy arrays with their dtype names.
#include <fmt/format.h>

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
    if (t.size() != 3 && t.size() != 4)
      Refuse("producer: a tensor spec is (name, dtype, per-sample shape[, values budget])");
    producer::TensorSpec s;
    s.name = t[0].cast<std::string>();
    const std::string dtype = t[1].cast<std::string>();
    const core::DTypeInfo* info = core::DTypeNamed(dtype);
    if (info == nullptr)
      Refuse("producer: tensor '" + s.name + "' has dtype " + dtype + "; use one of " +
             core::DTypeNames() + " (convert it first)");
    s.dtype = info->code;
    for (const py::handle& d : t[2].cast<py::tuple>()) s.shape.push_back(d.cast<int64_t>());
    if (t.size() == 4) s.values_bytes = t[3].cast<uint64_t>();
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

// "12.5 MiB"-style sizes for messages, and the budget to suggest (twice the need, in MiB).
std::string Mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

// The pieces of a variable-length tensor of one batch: each (source, bytes) to copy into its
// values and the row offsets. `obj` is a list of per-sample arrays or (values, offsets).
struct RaggedPayload {
  std::vector<py::array> keep;  // the arrays the sources point into
  std::vector<std::pair<const void*, size_t>> pieces;
  std::vector<int64_t> offsets{0};
};

RaggedPayload RaggedFrom(const py::handle& obj, const producer::TensorSpec& spec, int64_t n) {
  const uint64_t row = spec.sample_bytes();
  const size_t item = core::DTypeInfoOf(spec.dtype)->bytes;
  RaggedPayload p;
  auto rows_of = [&](const py::array& a, const std::string& what) -> int64_t {
    if (a.ndim() < 1 || a.itemsize() != py::ssize_t(item) ||
        uint64_t(a.nbytes()) != uint64_t(a.shape(0)) * row)
      Refuse("producer: " + what + " of tensor '" + spec.name + "' has " +
             std::to_string(a.nbytes()) + " bytes in " + std::to_string(a.ndim()) +
             " dimensions, expected rows of " + std::to_string(row) + " bytes (the first "
             "batch's per-row shape and dtype)");
    return a.shape(0);
  };
  if (py::isinstance<py::tuple>(obj)) {  // (values, offsets): a jagged nested tensor
    auto pair = obj.cast<py::tuple>();
    auto values = py::array::ensure(pair[0], py::array::c_style);
    auto off = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(pair[1]);
    if (!values || !off) throw py::error_already_set();
    const int64_t rows = rows_of(values, "the values");
    if (off.ndim() != 1 || off.shape(0) != n + 1)
      Refuse("producer: tensor '" + spec.name + "' has " + std::to_string(off.size()) +
             " row offsets for a batch of " + std::to_string(n) + " samples (its labels); "
             "expected one per sample and one more");
    const int64_t* o = off.data();
    for (int64_t i = 0; i < n; ++i)
      if (o[0] != 0 || o[i + 1] < o[i] || o[n] != rows)
        Refuse("producer: tensor '" + spec.name + "' has row offsets that do not start at 0, "
               "decrease, or do not end at its " + std::to_string(rows) + " rows");
    p.offsets.assign(o, o + n + 1);
    p.pieces.push_back({values.data(), size_t(values.nbytes())});
    p.keep = {values, off};
    return p;
  }
  auto samples = obj.cast<py::list>();
  if (int64_t(samples.size()) != n)
    Refuse("producer: tensor '" + spec.name + "' has " + std::to_string(samples.size()) +
           " samples in a batch of " + std::to_string(n) + " (its labels); every tensor needs "
           "one entry per sample");
  for (size_t i = 0; i < samples.size(); ++i) {
    auto a = py::array::ensure(samples[i], py::array::c_style);
    if (!a) throw py::error_already_set();
    p.offsets.push_back(p.offsets.back() + rows_of(a, "sample " + std::to_string(i)));
    p.pieces.push_back({a.data(), size_t(a.nbytes())});
    p.keep.push_back(std::move(a));
  }
  return p;
}

// Copies a variable-length tensor into the slot: its values (within the spec's budget: a
// batch that needs more is refused, naming the tensor, the batch, the bytes and the option)
// and row offsets.
void CopyRagged(const py::handle& obj, const producer::TensorSpec& spec, uint8_t* values,
                int64_t* offsets, const producer::ExternalSlot& slot, int64_t n) {
  const RaggedPayload p = RaggedFrom(obj, spec, n);
  const uint64_t need = uint64_t(p.offsets.back()) * spec.sample_bytes();
  if (need > spec.values_bytes) {
    const uint64_t suggest = (2 * need + (1 << 20) - 1) >> 20;
    Refuse(fmt::format(
        "producer: batch {} of epoch {}: variable-length tensor '{}' needs {} bytes ({}) for "
        "the values of its {} samples ({} rows of {} bytes), more than its per-batch budget "
        "of {} bytes ({}); raise the budget: Producer(..., ragged={{'{}': '{}m'}}) (the ring's "
        "slots are sized when it is created, so the budget is fixed for the stream)",
        slot.batch, slot.epoch, spec.name, need, Mib(need), n, p.offsets.back(),
        spec.sample_bytes(), spec.values_bytes, Mib(spec.values_bytes), spec.name, suggest));
  }
  py::gil_scoped_release nogil;
  std::memcpy(offsets, p.offsets.data(), p.offsets.size() * sizeof(int64_t));
  for (const auto& [src, bytes] : p.pieces) {
    if (bytes == 0) continue;
    std::memcpy(values, src, bytes);
    values += bytes;
  }
}

}  // namespace

void CopyNamedTensors(const py::list& arrays, const std::vector<producer::TensorSpec>& specs,
                      const producer::ExternalSlot& slot, int64_t n) {
  if (arrays.size() != specs.size())
    Refuse("producer: a batch with " + std::to_string(arrays.size()) + " named tensors; every "
           "batch must have the first batch's " + std::to_string(specs.size()));
  for (size_t t = 0; t < specs.size(); ++t) {
    if (specs[t].variable_length()) {
      CopyRagged(arrays[t], specs[t], slot.tensors[t], slot.offsets[t], slot, n);
      continue;
    }
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
    std::memcpy(slot.tensors[t], src, size_t(n) * per);
  }
}

py::object NamedTensors(const Batch& b, const MakeView& make) {
  if (b.num_tensors() == 0) return py::none();
  py::dict out;
  for (int i = 0; i < b.num_tensors(); ++i) {
    const char* name = b.tensor_name(i);
    const TensorView v = b.tensor(name), off = b.offsets(name);
    const core::DTypeInfo* info = core::DTypeInfoOf(static_cast<uint32_t>(v.dtype));
    const char* dtype = info ? info->name : "uint8";
    if (off.data == nullptr) {
      out[py::str(name)] = py::make_tuple(make(v, nullptr), dtype);
      continue;
    }
    // The offsets (a few bytes per sample) in memory of their own, so that they neither pin
    // the batch's slot nor die with it (release="next" gives the batch back at the next call).
    const auto* first = static_cast<const int64_t*>(off.data);
    auto own = std::make_shared<std::vector<int64_t>>(first, first + off.shape[0]);
    TensorView owned = off;
    owned.data = own->data();
    out[py::str(name)] = py::make_tuple(make(v, nullptr), dtype, make(owned, own));
  }
  return out;
}

py::object NamedTensorCopies(const Batch& b, std::vector<std::pair<void*, TensorView>>* copies) {
  if (b.num_tensors() == 0) return py::none();
  py::dict out;
  // A new array for view `v`, with its copy to do.
  auto copy = [&](const TensorView& v) {
    py::array a = MakeNumpyArray(v);
    copies->push_back({a.mutable_data(), v});
    return a;
  };
  for (int i = 0; i < b.num_tensors(); ++i) {
    const char* name = b.tensor_name(i);
    const TensorView v = b.tensor(name), off = b.offsets(name);
    const core::DTypeInfo* info = core::DTypeInfoOf(static_cast<uint32_t>(v.dtype));
    const char* dtype = info ? info->name : "uint8";
    if (off.data == nullptr) out[py::str(name)] = py::make_tuple(copy(v), dtype);
    else out[py::str(name)] = py::make_tuple(copy(v), dtype, copy(off));
  }
  return out;
}

}  // namespace batchcast::python
