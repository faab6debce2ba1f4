// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The leader's model stage (docs/model-stage.md):
//   model(path=encoder.pt,input=images,output=embedding,device=cpu,dtype=float32,threads=0)
// a TorchScript module, loaded once, put in eval mode and frozen (torch::jit::freeze), run
// without autograd on every producer batch after the pipeline; its output is written into
// the slot's named tensor `output`, which every consumer views in place. With LibTorch 2.6
// or newer, path=*.pt2 is an exported program compiled by AOTInductor
// (torch._inductor.aoti_compile_and_package of a torch.export program), run the same way.
//
// Built only with LibTorch, as its own shared module (libbatchcast_model_stage.so): the
// producer core loads it when option 'stage' is set (producer/batch_stage.cc), so neither
// the leader library nor the CLI loads LibTorch otherwise.
// The headers this file uses, not <torch/torch.h> (all of the C++ frontend): a third less
// compile time for LibTorch's heaviest translation unit in make test's two torch trees.
#include <ATen/Parallel.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

// torch.export programs compiled ahead of time (AOTInductor packages): LibTorch >= 2.6.
#if __has_include(<torch/csrc/inductor/aoti_package/model_package_loader.h>) && \
    defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 6)
#include <dlfcn.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#define BATCHCAST_HAVE_AOTI 1
#endif

#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <thread>

#include "core/dtype.h"
#include "core/errors.h"
#include "core/log.h"
#include "producer/batch_stage.h"

namespace batchcast::stage {
namespace {

struct ModelSpec {
  std::string path, input = "images", output = "embedding", device = "cpu", dtype = "float32";
  bool keep_input = true;
  int threads = 0;  // 0: the cores the decode workers leave, at least 1
};

Result<ModelSpec> ParseModelSpec(std::string_view s, const std::string& who) {
  if (s.substr(0, 6) != "model(" || s.back() != ')')
    return InvalidArgumentError("{}: '{}' is not a stage; write model(path=...,input=...,"
                                "output=...)", who, s);
  ModelSpec m;
  std::string_view body = s.substr(6, s.size() - 7);
  while (!body.empty()) {
    const size_t comma = body.find(',');
    const std::string_view kv = body.substr(0, comma);
    body = comma == std::string_view::npos ? std::string_view() : body.substr(comma + 1);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos)
      return InvalidArgumentError("{}: '{}' is not key=value", who, kv);
    const std::string key(kv.substr(0, eq)), value(kv.substr(eq + 1));
    if (key == "path") m.path = value;
    else if (key == "input") m.input = value;
    else if (key == "output") m.output = value;
    else if (key == "device") m.device = value;
    else if (key == "dtype") m.dtype = value;
    else if (key == "threads") m.threads = std::atoi(value.c_str());
    else if (key == "keep_input" && (value == "true" || value == "false"))
      m.keep_input = value == "true";
    else
      return InvalidArgumentError("{}: unknown key or value '{}'; the keys are path, input, "
                                  "output, device=cpu|cuda, dtype=float32|float16, threads, "
                                  "keep_input=true|false", who, kv);
  }
  if (m.path.empty())
    return InvalidArgumentError("{}: no path=<TorchScript file or .pt2 package>", who);
  if (m.device != "cpu" && m.device != "cuda")
    return InvalidArgumentError("{}: device={}; use cpu or cuda", who, m.device);
  if (m.dtype != "float32" && m.dtype != "float16")
    return InvalidArgumentError("{}: dtype={}; use float32 or float16", who, m.dtype);
  return m;
}

// The cause of a LibTorch error in one line: its first line (a C++ backtrace follows), or,
// for an error raised inside TorchScript code, the last line ("RuntimeError: ...") after the
// interpreter's traceback.
std::string FirstLine(const std::exception& e) {
  std::string what = e.what();
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  if (what.rfind("The following operation failed in the TorchScript interpreter", 0) == 0)
    return what.substr(what.find_last_of('\n') + 1);
  return what.substr(0, what.find('\n'));
}

// forward with its last operation writing into memory given as a further argument `out`
// (forward(input, out)): the graph's returned value is made by an operator that has an
// `.out` overload (aten::linear, addmm, add, mean, ...), which is swapped in. nullptr (with
// the reason in *why) when the graph does not end so; the caller then copies the output.
std::unique_ptr<torch::jit::GraphFunction> ForwardWritingInto(torch::jit::Module& module,
                                                              std::string* why) {
  using torch::jit::Node;
  using torch::jit::Value;
  std::shared_ptr<torch::jit::Graph> g = module.get_method("forward").graph()->copy();
  if (g->outputs().size() != 1) {
    *why = "forward returns more than one value";
    return nullptr;
  }
  Node* last = g->outputs()[0]->node();
  if (last->kind().is_prim() || last->outputs().size() != 1) {
    *why = fmt::format("forward's last operation is {}", last->kind().toQualString());
    return nullptr;
  }
  Value* out = g->addInput("out")->setType(c10::TensorType::get());
  std::vector<Value*> inputs(last->inputs().begin(), last->inputs().end());
  inputs.push_back(out);
  Node* into = g->create(last->kind(), inputs, 1);
  into->insertBefore(last);
  into->output()->setType(last->output()->type());
  const c10::FunctionSchema* schema = into->maybeSchema();
  if (schema == nullptr || schema->overload_name() != "out") {
    *why = fmt::format("forward's last operation {} has no out= variant",
                       last->kind().toQualString());
    return nullptr;
  }
  last->output()->replaceAllUsesWith(into->output());
  last->destroy();
  return std::make_unique<torch::jit::GraphFunction>("forward_into", g, nullptr);
}

// The per-sample shape of images of layout `l` as the module sees them.
std::vector<int64_t> ImageShape(const pipeline::SampleLayout& l) {
  return l.layout == pipeline::Layout::kHWC ? std::vector<int64_t>{l.height, l.width, l.channels}
                                            : std::vector<int64_t>{l.channels, l.height, l.width};
}

class ModelStage : public producer::BatchStage {
 public:
  static Result<std::unique_ptr<producer::BatchStage>> Create(std::string_view spec,
                                                             const producer::StageContext& ctx);
  const std::string& name() const override { return name_; }
  std::vector<producer::TensorSpec> Outputs() const override { return {output_}; }
  const std::string& input() const override { return spec_.input; }
  bool keeps_input() const override { return spec_.keep_input; }
  Status Run(const producer::StageSlot& slot) override;
  int64_t copied_bytes() const override { return copied_bytes_; }

 private:
  Result<torch::Tensor> Forward(const torch::Tensor& input);
  // The input of n samples of per-sample `shape` in `data` (nullptr: zeros, for a probe) as
  // the module's input.
  torch::Tensor Input(uint8_t* data, int64_t n, const std::vector<int64_t>& shape) const;
  // Runs the module on dummy batches of 1 and 2 samples of per-sample `shape`: the output's
  // per-sample shape, which must not depend on the batch size.
  Result<std::vector<int64_t>> Probe(const std::vector<int64_t>& shape, const std::string& who);
  // Writes forward's output for the n samples at `in` into `out` (see Run).
  Status ForwardInto(uint8_t* in, int64_t n, const std::vector<int64_t>& in_shape, uint8_t* out);
  // forward(input, out) when it writes into `out` exactly what forward gives (checked on a
  // random batch of per-sample `shape`); else leaves the copy after forward.
  void PrepareWriteInPlace(const std::vector<int64_t>& shape);

  // Loads an AOTInductor package (path *.pt2) into aoti_.
  Status LoadExportedProgram(const std::string& who);

  std::string name_;
  ModelSpec spec_;
  torch::jit::Module module_;
#ifdef BATCHCAST_HAVE_AOTI
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> aoti_;  // path=*.pt2
#endif
  bool exported_ = false;  // path=*.pt2: an exported program, not TorchScript
  torch::Device device_ = torch::kCPU;
  torch::ScalarType in_type_ = torch::kUInt8;
  std::vector<int64_t> in_shape_;   // per sample (images: of the largest size)
  bool in_is_images_ = true;
  producer::TensorSpec output_;
  int64_t copied_bytes_ = 0;
  std::unique_ptr<torch::jit::GraphFunction> forward_into_;  // null: copy after forward
};

torch::Tensor ModelStage::Input(uint8_t* data, int64_t n, const std::vector<int64_t>& shape) const {
  std::vector<int64_t> sizes{n};
  sizes.insert(sizes.end(), shape.begin(), shape.end());
  torch::Tensor t = data ? torch::from_blob(data, sizes, torch::TensorOptions().dtype(in_type_))
                         : torch::zeros(sizes, torch::TensorOptions().dtype(in_type_));
  const bool half = spec_.dtype == "float16" && device_.is_cuda();
  return t.to(device_, half ? torch::kFloat16 : torch::kFloat32);
}

Result<torch::Tensor> ModelStage::Forward(const torch::Tensor& input) {
  try {
    c10::InferenceMode guard;
#ifdef BATCHCAST_HAVE_AOTI
    if (aoti_) {
      std::vector<torch::Tensor> outs = aoti_->run({input});
      if (outs.size() != 1)
        return InvalidArgumentError("{}: the exported program returned {} tensors, not one; "
                                    "return the embedding tensor only", name_, outs.size());
      return outs[0];
    }
#endif
    torch::jit::IValue out = module_.forward({input});
    if (!out.isTensor())
      return InvalidArgumentError("{}: forward returned {}, not one tensor; return the "
                                  "embedding tensor only", name_, out.tagKind());
    return out.toTensor();
  } catch (const std::exception& e) {
    return InternalError("{}: forward failed on a batch of {}: {}", name_, input.size(0),
                         FirstLine(e));
  }
}

Result<std::vector<int64_t>> ModelStage::Probe(const std::vector<int64_t>& in_shape,
                                               const std::string& who) {
  std::vector<int64_t> shape[2];
  for (int64_t n : {1, 2}) {
    Result<torch::Tensor> r = Forward(Input(nullptr, n, in_shape));
    if (!r.ok() && exported_)
      return r.status().WithContext(fmt::format(
          "{} (an exported program runs on every batch size the stream has: export it with a "
          "dynamic batch dimension, dynamic_shapes={{'x': {{0: torch.export.Dim('batch', "
          "min=1)}}}})", who));
    BC_ASSIGN_OR_RETURN(torch::Tensor out, std::move(r));
    if (out.dim() < 1 || out.size(0) != n)
      return InvalidArgumentError("{}: the output of a batch of {} has shape {}; its first "
                                  "dimension must be the batch", who, n,
                                  fmt::format("{}", fmt::join(out.sizes(), "x")));
    shape[n - 1].assign(out.sizes().begin() + 1, out.sizes().end());
  }
  if (shape[0] != shape[1])
    return InvalidArgumentError("{}: the output shape is not fixed: {} per sample for a batch of "
                                "1, {} for a batch of 2", who, fmt::join(shape[0], "x"),
                                fmt::join(shape[1], "x"));
  return shape[0];
}

Result<std::unique_ptr<producer::BatchStage>> ModelStage::Create(
    std::string_view spec, const producer::StageContext& ctx) {
  const std::string who = fmt::format("stage {} {}", ctx.index, spec);
  BC_ASSIGN_OR_RETURN(ModelSpec m, ParseModelSpec(spec, who));
  std::unique_ptr<ModelStage> s(new ModelStage());
  s->spec_ = m;
  s->name_ = fmt::format("stage {} model({}): {} -> {}", ctx.index, m.path, m.input, m.output);
  // The input: the images, or a tensor an earlier stage writes.
  if (m.input == "images") {
    const pipeline::SampleLayout& l = ctx.images;
    if (l.bytes() == 0) return InvalidArgumentError("{}: input=images but the batches have none", who);
    s->in_type_ = l.dtype == pipeline::DType::kFloat32 ? torch::kFloat32 : torch::kUInt8;
    s->in_shape_ = ImageShape(l);
  } else {
    auto it = std::find_if(ctx.tensors.begin(), ctx.tensors.end(),
                           [&](const producer::TensorSpec& t) { return t.name == m.input; });
    if (it == ctx.tensors.end())
      return InvalidArgumentError("{}: input={} is neither images nor the output of an earlier "
                                  "stage", who, m.input);
    const core::DTypeInfo* info = core::DTypeInfoOf(it->dtype);
    s->in_is_images_ = false;
    s->in_type_ = std::string(info->name) == "float16" ? torch::kFloat16 : torch::kFloat32;
    s->in_shape_ = it->shape;
  }
  if (m.device == "cuda") {
    if (!torch::cuda::is_available())
      return FailedPreconditionError("{}: device=cuda, but this LibTorch sees no CUDA device "
                                     "(none present, or a CPU-only LibTorch such as Debian's); "
                                     "use device=cpu", who);
    s->device_ = torch::Device(torch::kCUDA, 0);
  }
  struct stat st;
  if (stat(m.path.c_str(), &st) != 0)
    return NotFoundError("{}: no TorchScript file '{}' ({})", who, m.path, std::strerror(errno));
  s->exported_ = m.path.size() > 4 && m.path.compare(m.path.size() - 4, 4, ".pt2") == 0;
  if (s->exported_) {
    BC_RETURN_IF_ERROR(s->LoadExportedProgram(who));
  } else try {
    torch::jit::Module module = torch::jit::load(m.path, s->device_);
    module.eval();
    s->module_ = torch::jit::freeze(module);
  } catch (const std::exception& e) {
    return InvalidArgumentError("{}: '{}' is not a TorchScript module this LibTorch can load "
                                "(save it with torch.jit.script(m).save(path)): {}", who, m.path,
                                FirstLine(e));
  }
  // Threads: the cores the decode workers leave, so the two do not oversubscribe.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = m.threads > 0 ? m.threads
                      : ctx.decode_threads > 0 ? std::max(1, cores - ctx.decode_threads) : 1;
  at::set_num_threads(threads);
  // Probe every input size the stream has (progressive resizing: each size of the schedule):
  // one per-sample output shape for all, so the slot's named tensor is laid out once.
  std::vector<std::vector<int64_t>> sizes{s->in_shape_};
  if (s->in_is_images_ && !ctx.image_sizes.empty()) {
    sizes.clear();
    for (const pipeline::SampleLayout& l : ctx.image_sizes) sizes.push_back(ImageShape(l));
  }
  std::vector<int64_t> shape;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string at = sizes.size() > 1 ? fmt::format("{} (input {} per sample)", who,
                                                          fmt::join(sizes[i], "x"))
                                            : who;
    BC_ASSIGN_OR_RETURN(std::vector<int64_t> got, s->Probe(sizes[i], at));
    if (i > 0 && got != shape)
      return InvalidArgumentError(
          "{}: the output shape depends on the image size: {} per sample for input {}, {} for "
          "input {}; with progressive resizing (option 'resize') the module must give one "
          "shape at every size (pool globally before the linear layer, e.g. "
          "AdaptiveAvgPool2d(1))", who, fmt::join(shape, "x"), fmt::join(sizes[0], "x"),
          fmt::join(got, "x"), fmt::join(sizes[i], "x"));
    shape = std::move(got);
  }
  s->output_.name = m.output;
  s->output_.dtype = core::DTypeNamed(m.dtype)->code;
  s->output_.shape = shape;
  s->PrepareWriteInPlace(sizes[0]);
  BC_LOG(Info, Pipe, "{}: frozen, {} thread(s), output {} {} per sample{}{}", s->name_, threads,
         m.dtype, fmt::join(shape, "x"), m.keep_input ? "" : ", input not published",
         s->forward_into_ ? ", written in place" : "");
  return std::unique_ptr<producer::BatchStage>(std::move(s));
}

Status ModelStage::LoadExportedProgram(const std::string& who) {
#ifdef BATCHCAST_HAVE_AOTI
  // The package's compiled model resolves LibTorch's C shim (aoti_torch_*) in the global
  // symbol scope, but LibTorch came in locally, with this module (the producer core dlopens
  // it): make the library that holds the shim global (it is loaded already; RTLD_NOLOAD).
  Dl_info shim;
  if (dladdr(reinterpret_cast<void*>(&aoti_torch_dtype_float32), &shim) != 0 &&
      shim.dli_fname != nullptr)
    dlopen(shim.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  try {
    aoti_ = std::make_unique<torch::inductor::AOTIModelPackageLoader>(spec_.path);
  } catch (const std::exception& e) {
    return InvalidArgumentError("{}: '{}' is not an AOTInductor package this LibTorch {} can "
                                "load (torch._inductor.aoti_compile_and_package of a "
                                "torch.export program, made by the same torch version): {}",
                                who, spec_.path, TORCH_VERSION, FirstLine(e));
  }
  return Status::Ok();
#else
  return InvalidArgumentError(
      "{}: '{}' is an exported program (.pt2, an AOTInductor package), which needs LibTorch "
      "2.6 or newer; this leader's LibTorch is {}.{}: save a TorchScript module instead "
      "(torch.jit.script(model).save('model.pt')), or build Batchcast against a newer LibTorch "
      "(a pip torch's, docs/python.md 'Supported versions')", who, spec_.path,
      TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
#endif
}

Status ModelStage::Run(const producer::StageSlot& slot) {
  uint8_t* in = in_is_images_ ? slot.data : slot.layout->tensor(slot.data, spec_.input);
  uint8_t* out = slot.layout->tensor(slot.data, output_.name);
  if (in == nullptr || out == nullptr)
    return InternalError("{}: the slot has no tensor '{}'", name_, in ? output_.name : spec_.input);
  // Images: this batch's size (progressive resizing changes it between epochs).
  return ForwardInto(in, slot.num_samples, in_is_images_ ? ImageShape(slot.images) : in_shape_,
                     out);
}

void ModelStage::PrepareWriteInPlace(const std::vector<int64_t>& shape) {
  // Only a float32 output on the CPU can be the module's own result (float16 and cuda
  // outputs are converted or brought back to the host: one copy).
  std::string why = exported_ ? "an exported program" : "dtype=float16 or device=cuda";
  if (!exported_ && spec_.dtype == "float32" && device_.is_cpu()) {
    try {
      forward_into_ = ForwardWritingInto(module_, &why);
    } catch (const std::exception& e) {
      why = FirstLine(e);
    }
  }
  if (forward_into_) {
    why.clear();
    std::vector<int64_t> sizes{2};
    sizes.insert(sizes.end(), shape.begin(), shape.end());
    const torch::Tensor x = torch::rand(sizes) * 255;
    std::vector<int64_t> out_sizes{2};
    out_sizes.insert(out_sizes.end(), output_.shape.begin(), output_.shape.end());
    try {
      c10::InferenceMode guard;
      const torch::Tensor want = module_.forward({x}).toTensor();
      torch::Tensor out = torch::full(out_sizes, -1.0f);
      const torch::jit::IValue got = (*forward_into_)({module_._ivalue(), x, out});
      if (!got.isTensor() || got.toTensor().data_ptr() != out.data_ptr() ||
          !torch::allclose(out, want, 1e-5, 1e-6))
        why = "forward(input, out) did not give forward's result in out";
    } catch (const std::exception& e) {
      why = FirstLine(e);
    }
    if (why.empty()) return;
    forward_into_.reset();
  }
  BC_LOG(Info, Pipe, "{}: the output is copied into the slot after forward ({})", name_, why);
}

Status ModelStage::ForwardInto(uint8_t* in, int64_t n, const std::vector<int64_t>& in_shape,
                               uint8_t* out) {
  std::vector<int64_t> sizes{n};
  sizes.insert(sizes.end(), output_.shape.begin(), output_.shape.end());
  const auto type = spec_.dtype == "float16" ? torch::kFloat16 : torch::kFloat32;
  torch::Tensor slot = torch::from_blob(out, sizes, torch::TensorOptions().dtype(type));
  const torch::Tensor input = Input(in, n, in_shape);
  torch::Tensor y;
  if (forward_into_) {  // the last operation writes into the slot
    try {
      c10::InferenceMode guard;
      y = (*forward_into_)({module_._ivalue(), input, slot}).toTensor();
    } catch (const std::exception& e) {
      return InternalError("{}: forward failed on a batch of {}: {}", name_, n, FirstLine(e));
    }
  } else {
    BC_ASSIGN_OR_RETURN(y, Forward(input));
  }
  if (y.sizes().vec() != sizes)
    return InternalError("{}: forward returned shape {} for {} samples, {} at start", name_,
                         fmt::join(y.sizes(), "x"), n, fmt::join(output_.shape, "x"));
  if (y.data_ptr() == slot.data_ptr()) return Status::Ok();  // written in place
  slot.copy_(y);  // one write into the slot, no intermediate host buffer
  copied_bytes_ += static_cast<int64_t>(slot.nbytes());
  return Status::Ok();
}

Result<std::unique_ptr<producer::BatchStage>> CreateModelStage(std::string_view spec,
                                                               const producer::StageContext& ctx) {
  return ModelStage::Create(spec, ctx);
}

}  // namespace
}  // namespace batchcast::stage

// The module's one entry point: the producer core dlopens this library and asks for the
// factory (producer/batch_stage.cc).
extern "C" __attribute__((visibility("default"))) batchcast::producer::StageFactory
batchcast_model_stage_factory() {
  return &batchcast::stage::CreateModelStage;
}
