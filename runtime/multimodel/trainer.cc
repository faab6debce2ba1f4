// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The only LibTorch translation unit of train-many (compile time: docs/multi-model.md).
#include "multimodel/trainer.h"

#include <sys/resource.h>
#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/script.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "batchcast/consumer.h"
#include "batchcast/torch.h"
#include "core/errors.h"
#include "core/log.h"
#include "data/dataset_reader.h"
#include "multimodel/progress.h"
#include "multimodel/schedule.h"
#include "node/consumer_internal.h"
#include "telemetry/collector.h"

namespace batchcast::multimodel {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double PeakRssMib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

double CurrentRssMib() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// splitmix64: the per-sample term of an epoch's order-independent id checksum.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The cause in a LibTorch error: a TorchScript interpreter error's "RuntimeError: ..."
// line (after the script's traceback), else the first line (a C++ backtrace follows it).
std::string FirstLine(const std::string& s) {
  size_t from = s.rfind("Error: ");
  from = from == std::string::npos ? 0 : s.rfind('\n', from) + 1;  // npos + 1 == 0
  std::string line = s.substr(from, s.find('\n', from) - from);
  return line.size() > 400 ? line.substr(0, 400) + "..." : line;
}

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) return IoError("train-many: cannot write {}: {}", tmp, std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return IoError("train-many: cannot rename {}: {}", tmp, ec.message());
  return Status::Ok();
}

// A bitmap as hex digits, bit i in digit i / 4 (for the seen ids of a partial epoch).
std::string BitsToHex(const std::vector<bool>& bits) {
  std::string hex((bits.size() + 3) / 4, '0');
  for (size_t i = 0; i < hex.size(); ++i) {
    int nibble = 0;
    for (size_t b = 0; b < 4 && 4 * i + b < bits.size(); ++b) nibble |= bits[4 * i + b] << b;
    hex[i] = "0123456789abcdef"[nibble];
  }
  return hex;
}

std::vector<bool> HexToBits(const std::string& hex) {
  std::vector<bool> bits(4 * hex.size());
  for (size_t i = 0; i < hex.size(); ++i) {
    const char c = hex[i];
    const int nibble = c >= 'a' ? c - 'a' + 10 : c - '0';
    for (size_t b = 0; b < 4; ++b) bits[4 * i + b] = (nibble >> b) & 1;
  }
  return bits;
}

// What one model epoch saw: the exactly-once evidence and the training metrics.
struct EpochRecord {
  int epoch = 0;              // the model's own epoch (0-based)
  uint64_t stream_epoch = 0;  // BatchInfo::epoch it was trained on
  int64_t samples = 0, distinct = 0, steps = 0, correct = 0;
  uint64_t id_hash = 0;  // sum of Mix(sample id) over the epoch, mod 2^64
  double loss_sum = 0, step_s = 0, lr = 0;
  std::vector<bool> seen;

  void Add(const int64_t* ids, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      auto id = size_t(ids[i]);
      if (id >= seen.size()) seen.resize(std::max(id + 1, seen.size() * 2));
      if (!seen[id]) ++distinct;
      seen[id] = true;
      id_hash += Mix(ids[i]);
    }
    samples += n;
  }
  // The partial record of a mid-epoch checkpoint (with the seen-ids bitmap, as hex).
  json Save() const {
    return {{"epoch", epoch},       {"stream_epoch", stream_epoch}, {"samples", samples},
            {"distinct", distinct}, {"steps", steps},               {"correct", correct},
            {"id_hash", std::to_string(id_hash)}, {"loss_sum", loss_sum}, {"step_s", step_s},
            {"lr", lr},             {"seen", BitsToHex(seen)}};
  }
  static EpochRecord Load(const json& j) {
    EpochRecord r;
    r.epoch = j.at("epoch");
    r.stream_epoch = j.at("stream_epoch");
    r.samples = j.at("samples");
    r.distinct = j.at("distinct");
    r.steps = j.at("steps");
    r.correct = j.at("correct");
    r.id_hash = std::stoull(j.at("id_hash").get<std::string>());
    r.loss_sum = j.at("loss_sum");
    r.step_s = j.at("step_s");
    r.lr = j.at("lr");
    r.seen = HexToBits(j.at("seen").get<std::string>());
    return r;
  }
  json ToJson() const {
    return {{"epoch", epoch},
            {"stream_epoch", stream_epoch},
            {"samples", samples},
            {"distinct", distinct},
            {"id_hash", std::to_string(id_hash)},
            {"steps", steps},
            {"loss", steps ? loss_sum / double(steps) : 0.0},
            {"accuracy", samples ? double(correct) / double(samples) : 0.0},
            {"lr", lr},
            {"step_ms", steps ? 1e3 * step_s / double(steps) : 0.0},
            {"samples_per_s", step_s > 0 ? double(samples) / step_s : 0.0},
            {"peak_rss_mib", PeakRssMib()}};
  }
};

struct ModelState {
  int index = 0;
  const ModelSpec* spec = nullptr;
  std::string dir;  // output_dir/NAME
  std::unique_ptr<torch::jit::Module> module;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  int64_t params = 0;
  int epochs_done = 0;
  int64_t steps = 0;
  bool finished = false;
  bool shape_checked = false;
  json epochs = json::array();  // EpochRecord::ToJson of every epoch, over restarts
  double train_s = 0, test_accuracy = -1;
  StreamPosition position;                // where its consumer resumes (mid-epoch resume)
  std::unique_ptr<EpochRecord> partial;   // the interrupted epoch so far (mid-epoch resume)
  std::string mid_file;                   // the current mid-epoch checkpoint's file stem
};

// The files of the checkpoint after `epochs` epochs: one pair per epoch, so that the
// state.json naming them is replaced last and a kill at any moment leaves one whole pair.
std::string CheckpointFile(const ModelState& m, int epochs, const char* what) {
  return m.dir + "/checkpoint-e" + std::to_string(epochs) + what + ".pt";
}
// A mid-epoch checkpoint's pair: `stem` is "checkpoint-eE-sS" (after S steps in all).
std::string MidFile(const ModelState& m, const std::string& stem, const char* what) {
  return m.dir + "/" + stem + what + ".pt";
}

void RemovePair(const std::string& model_file, const std::string& optimizer_file) {
  std::error_code ec;  // best effort: a file left behind is only disk space
  fs::remove(model_file, ec);
  fs::remove(optimizer_file, ec);
}

// Adam's and AdamW's step count (the same for every parameter); -1 for SGD, which keeps none.
int64_t OptimizerSteps(const torch::optim::Optimizer& o, Optimizer kind) {
  if (kind == Optimizer::kSgd || o.state().empty()) return kind == Optimizer::kSgd ? -1 : 0;
  const torch::optim::OptimizerParamState& st = *o.state().begin()->second;
  if (kind == Optimizer::kAdam) return static_cast<const torch::optim::AdamParamState&>(st).step();
  return static_cast<const torch::optim::AdamWParamState&>(st).step();
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const ModelSpec& s,
                                                       std::vector<torch::Tensor> params) {
  switch (s.optimizer) {
    case Optimizer::kSgd:
      return std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(s.lr).momentum(s.momentum).weight_decay(s.weight_decay));
    case Optimizer::kAdam:
      return std::make_unique<torch::optim::Adam>(
          params, torch::optim::AdamOptions(s.lr).weight_decay(s.weight_decay));
    case Optimizer::kAdamW:
      return std::make_unique<torch::optim::AdamW>(
          params, torch::optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
  }
  return nullptr;
}

}  // namespace

struct MultiModelTrainer::Impl {
  TrainManyConfig config;
  TrainManyOptions options;
  std::vector<ModelState> models;
  std::pair<torch::Tensor, torch::Tensor> test;  // normalized images, labels (if any)

  std::mutex mu;  // events, completion order, first error
  std::ofstream events;
  int64_t event_seq = 0;
  std::vector<std::string> completion;
  Status error;
  std::atomic<bool> abort{false};
  Clock::time_point t0 = Clock::now();

  Status Load();
  Status LoadModel(ModelState& m);
  Status LoadResumePoint(ModelState& m, const ModelStateFile& st, const std::string& state_path);
  Status LoadTestSet();
  void Event(const ModelState& m, const std::string& kind, json extra = json::object());
  void Fail(const Status& st);
  // Paused by the control file: a line "NAME" (at the next epoch end) or "NAME@K" (once K
  // epochs are done).
  bool Paused(const ModelState& m);
  // Waits (polling the control file) until `m` is not paused; false if the run aborts.
  bool WaitWhilePaused(ModelState& m);
  // Attaches a consumer, trains up to `epochs` whole epochs, detaches; returns the epochs
  // done (fewer when paused).
  Result<int> RunEpochs(ModelState& m, int epochs);
  Status Step(ModelState& m, const Batch& batch, EpochRecord* rec);
  // Appends to the model's named series model/NAME/METRIC (docs/multi-model.md "Telemetry").
  Status Record(const ModelState& m, std::initializer_list<std::pair<const char*, double>> points);
  Status EndEpoch(ModelState& m, EpochRecord& rec);
  Status SavePair(ModelState& m, const std::string& model_file, const std::string& optimizer_file);
  json State(const ModelState& m, int64_t steps, StreamPosition next);
  Status Checkpoint(ModelState& m, uint64_t stream_epoch);
  Status MidCheckpoint(ModelState& m, const EpochRecord& rec, StreamPosition next);
  Status SaveFinal(ModelState& m);
  void Release(ModelState& m);
  Status RunConcurrent();
  Status RunSequential();
  Status WriteResults();
};

void MultiModelTrainer::Impl::Event(const ModelState& m, const std::string& kind, json extra) {
  std::lock_guard<std::mutex> lock(mu);
  extra["seq"] = event_seq++;
  extra["t"] = Seconds(Clock::now() - t0);
  extra["model"] = m.spec->name;
  extra["event"] = kind;
  events << extra.dump() << "\n";
  events.flush();
  if (kind == "finished") completion.push_back(m.spec->name);
}

void MultiModelTrainer::Impl::Fail(const Status& st) {
  std::lock_guard<std::mutex> lock(mu);
  if (error.ok()) error = st;
  abort = true;
}

bool MultiModelTrainer::Impl::Paused(const ModelState& m) {
  if (config.control_file.empty()) return false;
  std::ifstream in(config.control_file);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    auto at = line.find('@');
    if (line.substr(0, at) != m.spec->name) continue;
    if (at == std::string::npos) return true;
    try {
      if (m.epochs_done >= std::stoi(line.substr(at + 1))) return true;
    } catch (const std::exception&) {
      BC_LOG(Warn, Init,
             "train-many: control file {}: line '{}' is not NAME or NAME@EPOCHS; ignored",
             config.control_file, line);
    }
  }
  return false;
}

bool MultiModelTrainer::Impl::WaitWhilePaused(ModelState& m) {
  if (!Paused(m)) return true;
  Event(m, "paused", {{"epochs_done", m.epochs_done}, {"steps", m.steps}});
  BC_LOG(Info, Init, "train-many: model '{}' paused after {} epochs (remove it from {} to resume)",
         m.spec->name, m.epochs_done, config.control_file);
  while (!abort && Paused(m)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (abort) return false;
  Event(m, "resumed", {{"epochs_done", m.epochs_done}});
  return true;
}

// The stream position and, inside an epoch, the mid-epoch checkpoint of a state.json.
Status MultiModelTrainer::Impl::LoadResumePoint(ModelState& m, const ModelStateFile& st,
                                                const std::string& state_path) {
  m.position = st.progress.position;
  if (st.partial.is_null()) return Status::Ok();
  try {
    m.mid_file = st.partial.at("file").get<std::string>();  // removed at the next checkpoint
    if (!options.resume_mid_epoch) {  // train-many against a service: at epoch starts
      BC_LOG(Info, Init,
             "train-many: model '{}' was checkpointed inside epoch {}; this front door resumes "
             "at epoch starts, so the epoch is trained again from its start",
             m.spec->name, m.epochs_done);
      m.position = {0, 0};
      return Status::Ok();
    }
    m.steps = st.partial.at("steps").get<int64_t>();
    m.partial = std::make_unique<EpochRecord>(EpochRecord::Load(st.partial.at("record")));
  } catch (const json::exception& e) {
    return CorruptDataError(
        "train-many: checkpoint state {} has a malformed mid-epoch record 'partial' ({}); "
        "delete {} to train model '{}' from scratch",
        state_path, e.what(), m.dir, m.spec->name);
  }
  return Status::Ok();
}

Status MultiModelTrainer::Impl::LoadModel(ModelState& m) {
  const ModelSpec& s = *m.spec;
  m.dir = (fs::path(config.output_dir) / s.name).string();
  std::error_code ec;
  fs::create_directories(m.dir, ec);
  if (ec) return IoError("train-many: cannot create {}: {}", m.dir, ec.message());
  const std::string state_path = m.dir + "/state.json";
  BC_ASSIGN_OR_RETURN(std::optional<ModelStateFile> st, ReadModelStateFile(state_path, s.name));
  if (st) {  // a restart: continue where the last run checkpointed
    m.epochs_done = st->progress.epochs_done;
    m.steps = st->steps;
    m.finished = st->progress.finished;
    m.params = st->params;
    m.epochs = st->epochs;
    m.train_s = st->train_s;
    m.test_accuracy = st->test_accuracy;
    BC_RETURN_IF_ERROR(LoadResumePoint(m, *st, state_path));
    if (m.epochs_done > s.epochs)
      return FailedPreconditionError(
          "train-many: model '{}' has a checkpoint of {} epochs but is configured for {}; raise "
          "its epochs or delete {}",
          s.name, m.epochs_done, s.epochs, m.dir);
    if (m.finished) return Status::Ok();
  }
  const std::string from = m.partial          ? MidFile(m, m.mid_file, "")
                           : m.epochs_done > 0 ? CheckpointFile(m, m.epochs_done, "")
                                               : s.path;
  try {
    m.module = std::make_unique<torch::jit::Module>(torch::jit::load(from));
  } catch (const c10::Error& e) {
    return InvalidArgumentError(
        "train-many: model '{}': {} is not a TorchScript module (torch.jit.load fails: {}); save "
        "it with torch.jit.script(model).save(path)",
        s.name, from, FirstLine(e.what_without_backtrace()));
  }
  std::vector<torch::Tensor> params;
  for (const torch::Tensor& p : m.module->parameters()) {
    params.push_back(p);
    m.params += p.numel();
  }
  if (params.empty())
    return InvalidArgumentError("train-many: model '{}' ({}) has no parameters to train", s.name,
                                s.path);
  m.optimizer = MakeOptimizer(s, params);
  if (m.epochs_done > 0 || m.partial) {
    const std::string file = m.partial ? MidFile(m, m.mid_file, "_optimizer")
                                       : CheckpointFile(m, m.epochs_done, "_optimizer");
    try {
      torch::load(*m.optimizer, file);
    } catch (const c10::Error& e) {
      return CorruptDataError(
          "train-many: model '{}': optimizer state {} cannot be loaded ({}); delete {} to train "
          "it from scratch",
          s.name, file, FirstLine(e.what_without_backtrace()), m.dir);
    }
  }
  return Status::Ok();
}

Status MultiModelTrainer::Impl::LoadTestSet() {
  if (config.test_dataset.empty()) return Status::Ok();
  BC_ASSIGN_OR_RETURN(auto reader, data::DatasetReader::Open(config.test_dataset));
  const auto& info = reader->info();
  if (info.kind != data::SampleKind::kRaw)
    return InvalidArgumentError(
        "train-many: test_dataset {} is not raw images; convert it with --encode raw "
        "(scripts/fashion_mnist.sh)",
        config.test_dataset);
  const int64_t n =
      config.test_limit > 0 ? std::min(config.test_limit, info.num_samples) : info.num_samples;
  std::vector<std::vector<uint8_t>> samples;
  BC_RETURN_IF_ERROR(reader->ReadSamples(0, n, &samples));
  const int64_t h = info.raw_height, w = info.raw_width, c = info.raw_channels;
  auto images = torch::empty({n, h, w, c}, torch::kUInt8);  // stored HWC
  auto labels = torch::empty({n}, torch::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(images.data_ptr<uint8_t>() + i * h * w * c, samples[size_t(i)].data(),
                size_t(h * w * c));
    labels[i] = reader->Label(i);
  }
  test = {
      images.permute({0, 3, 1, 2}).to(torch::kFloat32).div(255.0).sub(config.mean).div(config.std),
      labels};
  return Status::Ok();
}

Status MultiModelTrainer::Impl::Load() {
  std::error_code ec;
  fs::create_directories(config.output_dir, ec);
  if (ec)
    return IoError("train-many: cannot create output_dir {}: {}", config.output_dir, ec.message());
  events.open(config.output_dir + "/events.jsonl", std::ios::app);
  if (!events)
    return IoError("train-many: cannot open {}/events.jsonl: {}", config.output_dir,
                   std::strerror(errno));
  models.resize(config.models.size());
  for (size_t i = 0; i < models.size(); ++i) {
    models[i].index = int(i);
    models[i].spec = &config.models[i];
    BC_RETURN_IF_ERROR(LoadModel(models[i]));
  }
  return LoadTestSet();
}

Status MultiModelTrainer::Impl::Step(ModelState& m, const Batch& batch, EpochRecord* rec) {
  const auto s0 = Clock::now();
  BC_ASSIGN_OR_RETURN(TorchBatch t, ToTorch(batch));
  rec->Add(batch.sample_ids(), batch.size());
  torch::Tensor x = AsNCHW(t).to(torch::kFloat32).div(255.0).sub(config.mean).div(config.std);
  m.module->train();
  m.optimizer->zero_grad();
  torch::Tensor out;
  try {
    out = m.module->forward({x}).toTensor();
  } catch (const std::exception& e) {  // c10::Error, or the interpreter's JITException
    return InvalidArgumentError(
        "train-many: model '{}' ({}) does not take the batch: images float32 {} (N,C,H,W); "
        "torch: {}; fix the model's input layer or the stream's image_size/channels",
        m.spec->name, m.spec->path, c10::str(x.sizes()), FirstLine(e.what()));
  }
  if (!m.shape_checked) {
    if (out.dim() != 2 || out.size(0) != x.size(0) || out.size(1) <= t.labels.max().item<int64_t>())
      return InvalidArgumentError(
          "train-many: model '{}' returns {} for a batch of {}; expected [N, classes] with "
          "classes above the largest label ({})",
          m.spec->name, c10::str(out.sizes()), x.size(0), t.labels.max().item<int64_t>());
    m.shape_checked = true;
  }
  torch::Tensor loss = m.spec->criterion == Criterion::kNll
                           ? torch::nll_loss(out, t.labels)
                           : torch::nn::functional::cross_entropy(out, t.labels);
  loss.backward();
  m.optimizer->step();
  const double batch_loss = loss.item<double>();
  const int64_t correct = out.argmax(1).eq(t.labels).sum().item<int64_t>();
  rec->loss_sum += batch_loss;
  rec->correct += correct;
  ++rec->steps;
  ++m.steps;
  const double step_s = Seconds(Clock::now() - s0);
  rec->step_s += step_s;
  const auto n = double(batch.size());
  return Record(m, {{"loss", batch_loss},
                    {"accuracy", double(correct) / n},
                    {"step_ms", 1e3 * step_s},
                    {"samples_per_s", step_s > 0 ? n / step_s : 0.0}});
}

Status MultiModelTrainer::Impl::Record(
    const ModelState& m, std::initializer_list<std::pair<const char*, double>> points) {
  if (options.collector == nullptr) return Status::Ok();
  for (const auto& [metric, value] : points)
    BC_RETURN_IF_ERROR(
        options.collector->Record(fmt::format("model/{}/{}", m.spec->name, metric), value));
  return Status::Ok();
}

Status MultiModelTrainer::Impl::SavePair(ModelState& m, const std::string& model_file,
                                         const std::string& optimizer_file) {
  try {
    m.module->save(model_file);
    torch::save(*m.optimizer, optimizer_file);
  } catch (const c10::Error& e) {
    return IoError("train-many: cannot checkpoint model '{}' in {}: {}", m.spec->name, m.dir,
                   FirstLine(e.what_without_backtrace()));
  }
  return Status::Ok();
}

// The model's state.json after `steps` steps, its consumer's next batch at `next`.
json MultiModelTrainer::Impl::State(const ModelState& m, int64_t steps, StreamPosition next) {
  return {{"epochs_done", m.epochs_done},
          {"steps", steps},
          {"finished", m.finished},
          {"params", m.params},
          {"epochs", m.epochs},
          {"train_s", m.train_s},
          {"test_accuracy", m.test_accuracy},
          {"position", {next.epoch, next.batch}}};
}

// At an epoch end (the stream's next batch is the next epoch's first).
Status MultiModelTrainer::Impl::Checkpoint(ModelState& m, uint64_t stream_epoch) {
  m.position = {stream_epoch + 1, 0};
  json st = State(m, m.steps, m.position);
  if (!m.finished)  // the model and optimizer first, then the state that names them
    BC_RETURN_IF_ERROR(SavePair(m, CheckpointFile(m, m.epochs_done, ""),
                                CheckpointFile(m, m.epochs_done, "_optimizer")));
  BC_RETURN_IF_ERROR(WriteFileAtomically(m.dir + "/state.json", st.dump(1)));
  // The previous pair (and, once finished, the last) is no longer named, nor a mid-epoch one.
  for (int e : {m.epochs_done - 1, m.finished ? m.epochs_done : -1})
    if (e >= 1) RemovePair(CheckpointFile(m, e, ""), CheckpointFile(m, e, "_optimizer"));
  if (!m.mid_file.empty()) RemovePair(MidFile(m, m.mid_file, ""), MidFile(m, m.mid_file, "_optimizer"));
  m.mid_file.clear();
  return Status::Ok();
}

// Inside an epoch (checkpoint_every): the model, the optimizer, the epoch's record so far
// and the consumer's position. The epoch-end pair stays: a front door that cannot resume
// inside an epoch restarts from it.
Status MultiModelTrainer::Impl::MidCheckpoint(ModelState& m, const EpochRecord& rec,
                                              StreamPosition next) {
  const std::string stem =
      fmt::format("checkpoint-e{}-s{}", m.epochs_done, m.steps);
  BC_RETURN_IF_ERROR(SavePair(m, MidFile(m, stem, ""), MidFile(m, stem, "_optimizer")));
  json st = State(m, m.steps - rec.steps, next);
  st["partial"] = {{"file", stem}, {"steps", m.steps}, {"record", rec.Save()}};
  BC_RETURN_IF_ERROR(WriteFileAtomically(m.dir + "/state.json", st.dump(1)));
  if (!m.mid_file.empty()) RemovePair(MidFile(m, m.mid_file, ""), MidFile(m, m.mid_file, "_optimizer"));
  m.mid_file = stem;
  m.position = next;
  Event(m, "checkpoint", {{"epoch", rec.epoch}, {"steps", m.steps}, {"samples", rec.samples},
                          {"position", {next.epoch, next.batch}}, {"pid", getpid()}});
  return Status::Ok();
}

double Evaluate(torch::jit::Module& module, const torch::Tensor& x, const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  module.eval();
  int64_t correct = 0;
  for (int64_t i = 0; i < x.size(0); i += 1000) {
    const int64_t end = std::min(x.size(0), i + 1000);
    correct += module.forward({x.slice(0, i, end)})
                   .toTensor()
                   .argmax(1)
                   .eq(y.slice(0, i, end))
                   .sum()
                   .item<int64_t>();
  }
  return x.size(0) > 0 ? double(correct) / double(x.size(0)) : 0.0;
}

// The separator, part one: evaluate and save the finished model and its optimizer.
Status MultiModelTrainer::Impl::SaveFinal(ModelState& m) {
  if (test.first.defined()) m.test_accuracy = Evaluate(*m.module, test.first, test.second);
  try {
    m.module->save(m.dir + "/model.pt");
    torch::save(*m.optimizer, m.dir + "/optimizer.pt");
  } catch (const c10::Error& e) {
    return IoError("train-many: cannot save model '{}' in {}: {}", m.spec->name, m.dir,
                   FirstLine(e.what_without_backtrace()));
  }
  m.finished = true;
  return Status::Ok();
}

// Part two, once its state says finished: free the module and the optimizer at once.
void MultiModelTrainer::Impl::Release(ModelState& m) {
  Event(m, "finished",
        {{"epochs_done", m.epochs_done},
         {"steps", m.steps},
         {"test_accuracy", m.test_accuracy},
         {"model_file", m.dir + "/model.pt"}});
  const double before = CurrentRssMib();
  m.optimizer.reset();
  m.module.reset();
  Event(m, "released", {{"rss_mib_before", before}, {"rss_mib_after", CurrentRssMib()}});
}

// The checkpoint (state.json) is the record of a model's epochs; events.jsonl is a log
// written after it, so a kill between the two loses a log line, never an epoch.
Status MultiModelTrainer::Impl::EndEpoch(ModelState& m, EpochRecord& rec) {
  ++m.epochs_done;
  m.train_s += rec.step_s;
  json j = rec.ToJson();
  j["optimizer_steps"] = OptimizerSteps(*m.optimizer, m.spec->optimizer);
  m.epochs.push_back(j);
  const bool last = m.epochs_done == m.spec->epochs;
  if (last) BC_RETURN_IF_ERROR(SaveFinal(m));
  BC_RETURN_IF_ERROR(Checkpoint(m, rec.stream_epoch));
  Event(m, "epoch", j);
  BC_RETURN_IF_ERROR(Record(m, {{"epoch_loss", j["loss"].get<double>()},
                                {"epoch_accuracy", j["accuracy"].get<double>()},
                                {"lr", rec.lr},
                                {"peak_rss_mib", j["peak_rss_mib"].get<double>()}}));
  if (options.collector != nullptr)  // one readable line per model epoch in the summary
    options.collector->Annotate(fmt::format(
        "model={} epoch={} loss={:.5f} accuracy={:.4f} samples_per_s={:.1f} step_ms={:.3f} "
        "peak_rss_mib={:.1f}",
        m.spec->name, rec.epoch, j["loss"].get<double>(), j["accuracy"].get<double>(),
        j["samples_per_s"].get<double>(), j["step_ms"].get<double>(),
        j["peak_rss_mib"].get<double>()));
  if (last) Release(m);
  return Status::Ok();
}

Result<int> MultiModelTrainer::Impl::RunEpochs(ModelState& m, int epochs) {
  Options o = options.stream;
  o.batch_size = m.spec->batch_size;
  o.epochs = epochs;
  if (options.resume_mid_epoch) {  // the leader started at or before every model's position
    o.start_epoch = int(m.position.epoch);
    o.start_batch = int64_t(m.position.batch);
    o.epochs = o.start_epoch + epochs;
  }
  BC_ASSIGN_OR_RETURN(auto consumer, Consumer::Attach(options.address, o, -1, m.spec->name));
  // Data wait, steps and batches of every model's consumer in the process's telemetry.
  internal::ConsumerAccess::SetCollector(*consumer, options.collector);
  Event(m, "attached", {{"epochs_done", m.epochs_done},
                        {"batch_size", o.batch_size},
                        {"position", {o.start_epoch, o.start_batch}},
                        {"pid", getpid()}});
  int done = 0;
  std::unique_ptr<EpochRecord> rec = std::move(m.partial);  // a resumed epoch goes on
  if (rec)
    for (auto& group : m.optimizer->param_groups()) group.options().set_lr(rec->lr);
  Batch batch;
  Status st;
  while (!abort && (st = consumer->Next(&batch)).ok()) {
    const BatchInfo info = batch.info();
    if (rec && rec->stream_epoch != info.epoch) {
      st = InternalError(
          "train-many: model '{}': epoch {} ended before its last batch; a bug, please report",
          m.spec->name, rec->stream_epoch);
      break;
    }
    if (!rec) {
      rec = std::make_unique<EpochRecord>();
      rec->epoch = m.epochs_done;
      rec->stream_epoch = info.epoch;
      rec->lr = LearningRate(*m.spec, m.epochs_done);
      for (auto& group : m.optimizer->param_groups()) group.options().set_lr(rec->lr);
    }
    if (!(st = Step(m, batch, rec.get())).ok()) break;
    batch.Release();
    if (int64_t(info.index) + 1 < consumer->BatchesPerEpoch(info.epoch)) {
      if (config.checkpoint_every > 0 && m.steps % config.checkpoint_every == 0 &&
          !(st = MidCheckpoint(m, *rec, consumer->Position())).ok())
        break;
      continue;
    }
    if (!(st = EndEpoch(m, *rec)).ok()) break;
    rec.reset();
    ++done;
    if (done == epochs || m.finished || Paused(m)) break;
  }
  batch.Release();
  if (st.ok() || st.code() == StatusCode::kEndOfStream)
    st = consumer->Detach();
  else
    consumer->Detach().IgnoreError();
  if (!st.ok()) return st;
  if (done < epochs && !m.finished && !abort && !Paused(m))
    return UnavailableError(
        "train-many: model '{}': the stream ended after {} of {} epochs; give the leader more "
        "epochs (or use batchcast serve)",
        m.spec->name, done, epochs);
  Event(m, "detached", {{"epochs_done", m.epochs_done}});
  return done;
}

Status MultiModelTrainer::Impl::RunConcurrent() {
  std::vector<std::thread> threads;
  for (ModelState& m : models) {
    if (m.finished) continue;
    threads.emplace_back([this, &m] {
      while (!abort && !m.finished) {
        if (!WaitWhilePaused(m)) return;
        auto r = RunEpochs(m, m.spec->epochs - m.epochs_done);
        if (!r.ok()) return Fail(r.status());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return error;
}

Status MultiModelTrainer::Impl::RunSequential() {
  std::vector<int64_t> params;
  std::vector<int> left;
  for (const ModelState& m : models) {
    params.push_back(m.params);
    left.push_back(m.finished ? 0 : m.spec->epochs - m.epochs_done);
  }
  std::vector<Turn> plan = PlanTurns(config, params, left);
  std::deque<Turn> turns(plan.begin(), plan.end());
  std::set<int> waiting;  // models paused with a turn left
  while (!turns.empty() && !abort) {
    for (const Turn& t : turns)  // a model paused before its turn came
      if (!waiting.count(t.model) && Paused(models[size_t(t.model)])) {
        waiting.insert(t.model);
        Event(models[size_t(t.model)], "paused",
              {{"epochs_done", models[size_t(t.model)].epochs_done}});
      }
    auto it = std::find_if(turns.begin(), turns.end(),
                           [&](const Turn& t) { return !Paused(models[size_t(t.model)]); });
    if (it == turns.end()) {  // only paused models are left: wait for a resume of any
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    ModelState& m = models[size_t(it->model)];
    if (waiting.erase(it->model) > 0) Event(m, "resumed", {{"epochs_done", m.epochs_done}});
    BC_ASSIGN_OR_RETURN(int done, RunEpochs(m, it->epochs));
    if (done < it->epochs && !m.finished) {
      it->epochs -= done;  // paused mid-turn: the rest of the turn waits at its place
    } else {
      turns.erase(it);
    }
  }
  return error;
}

Status MultiModelTrainer::Impl::WriteResults() {
  json r = {{"policy", PolicyName(config.policy)},
            {"completion_order", completion},
            {"wall_s", Seconds(Clock::now() - t0)},
            {"peak_rss_mib", PeakRssMib()}};
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  r["cpu_s"] = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  for (const ModelState& m : models)
    r["models"].push_back({{"name", m.spec->name},
                           {"params", m.params},
                           {"epochs_done", m.epochs_done},
                           {"steps", m.steps},
                           {"finished", m.finished},
                           {"train_s", m.train_s},
                           {"test_accuracy", m.test_accuracy},
                           {"epochs", m.epochs}});
  return WriteFileAtomically(config.output_dir + "/results.json", r.dump(1));
}

MultiModelTrainer::MultiModelTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MultiModelTrainer::~MultiModelTrainer() = default;

Result<std::unique_ptr<MultiModelTrainer>> MultiModelTrainer::Create(
    const TrainManyConfig& config, const TrainManyOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->options = options;
  at::set_num_threads(std::max(1, options.torch_threads));
  BC_RETURN_IF_ERROR(impl->Load());
  return std::unique_ptr<MultiModelTrainer>(new MultiModelTrainer(std::move(impl)));
}

void MultiModelTrainer::SetStream(const std::string& address, telemetry::Collector* collector) {
  impl_->options.address = address;
  impl_->options.collector = collector;
}

Status MultiModelTrainer::Run() {
  Impl& i = *impl_;
  Status st = i.config.policy == Policy::kConcurrent ? i.RunConcurrent() : i.RunSequential();
  if (!st.ok()) return st;
  return i.WriteResults();
}

}  // namespace batchcast::multimodel
