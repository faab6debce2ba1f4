// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The demo trainer: a hyper-parameter sweep of small LibTorch CNNs on one batch stream.
//
//   mpirun -n 5 sweep_trainer --dataset=train.h5 --test-dataset=test.h5 --lrs=0.01,0.05 ...
//
// --sharing=on  (default) batchcast::Runtime: rank 0 of the node is the leader, decodes
//               every batch once and every other rank trains on it zero-copy.
// --sharing=off every rank is a trainer with its own in-process leader (the same native
//               pipeline, options.threads divided by the number of trainers), i.e. what each
//               trial of a sweep does without Batchcast.
// Every trainer trains with its own learning rate (lrs[trainer rank % count]), evaluates on
// the test file, and the results are gathered over the trainers-only communicator. The
// first trainer prints the table and, with --results=FILE, writes one JSON object.
//
// Progressive resizing (--resize "resize(...)", docs/progressive-resizing.md): the CNN's
// head is size-agnostic (adaptive pooling to 7x7, exactly the old head at 28x28), every
// step scales the learning rate by the batch's lr_factor, and the test set is evaluated at
// the full size. --budget-s stops training after that many seconds of training time and
// --eval-every-s evaluates during training; each evaluation is recorded in the telemetry
// (gauge eval_accuracy and an annotation) so `batchcast report` draws accuracy over time.
#include <mpi.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

// The parts of LibTorch's C++ frontend this trainer uses; <torch/torch.h> (all of it) works
// as well and took a quarter longer to compile, which make demo waits for.
#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/upsampling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "batchcast/batchcast.h"
#include "batchcast/runtime.h"
#include "batchcast/torch.h"
#include "data/dataset_reader.h"
#include "producer/batch_source.h"
#include "node/consumer_internal.h"
#include "producer/producer.h"
#include "schedule/resize_spec.h"
#include "telemetry/collector.h"

namespace {

using batchcast::Options;
using batchcast::Result;
using batchcast::Status;
using batchcast::StatusCode;

// Fashion-MNIST statistics (pixels / 255), used for the training and the test images.
constexpr double kMean = 0.2860, kStd = 0.3530;

struct DemoFlags {
  std::string test_dataset;
  std::vector<double> lrs = {0.01, 0.03, 0.1, 0.3};
  bool sharing = true;
  std::string results;
  int64_t test_limit = 0;  // 0: the whole test file
  double budget_s = 0;     // stop after this much training time (0: run the epochs)
  double eval_every_s = 0; // evaluate every this much training time (0: only at the end)
  int eval_size = 0;       // test images resized to this (0: options.image_size or as stored)
  int64_t width = 16;      // channels of the CNN's first convolution
  bool budget_cpu = false; // --budget-clock=cpu: budget and evaluations on the training
                           // thread's CPU time (fair on a machine shared with other work)
};

Status ParseDemoFlags(const std::vector<std::string>& words, DemoFlags* f) {
  for (const std::string& w : words) {
    auto eq = w.find('=');
    std::string key = w.substr(0, eq), value = eq == std::string::npos ? "" : w.substr(eq + 1);
    if (key == "--test-dataset") {
      f->test_dataset = value;
    } else if (key == "--lrs") {
      f->lrs.clear();
      std::stringstream ss(value);
      for (std::string item; std::getline(ss, item, ',');) f->lrs.push_back(std::stod(item));
    } else if (key == "--sharing") {
      if (value != "on" && value != "off")
        return Status(StatusCode::kInvalidArgument,
                      "sweep_trainer: --sharing=" + value + " is not valid; use on or off");
      f->sharing = value == "on";
    } else if (key == "--results") {
      f->results = value;
    } else if (key == "--test-limit") {
      f->test_limit = std::stoll(value);
    } else if (key == "--budget-s") {
      f->budget_s = std::stod(value);
    } else if (key == "--eval-every-s") {
      f->eval_every_s = std::stod(value);
    } else if (key == "--eval-size") {
      f->eval_size = std::stoi(value);
    } else if (key == "--budget-clock") {
      if (value != "wall" && value != "cpu")
        return Status(StatusCode::kInvalidArgument,
                      "sweep_trainer: --budget-clock=" + value + " is not valid; use wall or cpu");
      f->budget_cpu = value == "cpu";
    } else if (key == "--width") {
      f->width = std::stoll(value);
      if (f->width <= 0)
        return Status(StatusCode::kInvalidArgument, "sweep_trainer: --width must be positive");
    } else {
      return Status(StatusCode::kInvalidArgument,
                    "sweep_trainer: unknown argument '" + w +
                        "'; demo flags are --test-dataset=, --lrs=, --sharing=on|off, "
                        "--results=, --test-limit=, --budget-s=, --eval-every-s=, --eval-size=, "
                        "--width=, --budget-clock=wall|cpu "
                        "(use --key=value), plus every batchcast option");
    }
  }
  if (f->lrs.empty())
    return Status(StatusCode::kInvalidArgument, "sweep_trainer: --lrs is empty; give e.g. --lrs=0.01,0.1");
  if (f->test_dataset.empty())
    return Status(StatusCode::kInvalidArgument,
                  "sweep_trainer: no test set; pass --test-dataset=fashion-mnist-test.h5");
  return Status::Ok();
}

// A small CNN for gray images of any size: two strided convolutions, adaptive average
// pooling to a 7x7 grid (the identity at 28x28, so the demo's network is unchanged there)
// and a linear classifier.
struct NetImpl : torch::nn::Module {
  // width: channels of the first convolution (the second has twice as many); 16 by default.
  explicit NetImpl(int64_t width = 16)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, width, 5).stride(2).padding(2)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(width, 2 * width, 3).stride(2).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(2 * width * 7 * 7, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1->forward(x));
    x = torch::relu(conv2->forward(x));
    x = torch::adaptive_avg_pool2d(x, {7, 7});
    return fc->forward(x.flatten(1));
  }
  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

torch::Tensor Normalize(const torch::Tensor& u8) {
  return u8.to(torch::kFloat32).div(255.0).sub(kMean).div(kStd);  // out of place: the view stays shared
}

// The test set, read once directly from the file (no stream: fixed order, no augmentation),
// resized (bilinear) to `size` when it is not 0 and not the stored size.
Result<std::pair<torch::Tensor, torch::Tensor>> LoadTestSet(const std::string& path, int64_t limit,
                                                            int size) {
  BC_ASSIGN_OR_RETURN(auto reader, batchcast::data::DatasetReader::Open(path));
  const auto& info = reader->info();
  if (info.kind != batchcast::data::SampleKind::kRaw || info.raw_channels != 1)
    return Status(StatusCode::kInvalidArgument,
                  "sweep_trainer: test set " + path +
                      " must be raw 1-channel images (scripts/fashion_mnist.sh writes one)");
  int64_t n = limit > 0 ? std::min(limit, info.num_samples) : info.num_samples;
  std::vector<std::vector<uint8_t>> samples;
  BC_RETURN_IF_ERROR(reader->ReadSamples(0, n, &samples));
  auto images = torch::empty({n, 1, info.raw_height, info.raw_width}, torch::kUInt8);
  auto labels = torch::empty({n}, torch::kInt64);
  const size_t per = size_t(info.raw_height) * info.raw_width;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(images.data_ptr<uint8_t>() + i * per, samples[i].data(), per);
    labels[i] = reader->Label(i);
  }
  torch::Tensor x = Normalize(images);
  if (size > 0 && (size != info.raw_height || size != info.raw_width))
    x = torch::nn::functional::interpolate(
        x, torch::nn::functional::InterpolateFuncOptions()
               .size(std::vector<int64_t>{size, size})
               .mode(torch::kBilinear)
               .align_corners(false));
  return std::make_pair(x, labels);
}

double Evaluate(Net& net, const torch::Tensor& x, const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  net->eval();
  int64_t correct = 0;
  for (int64_t i = 0; i < x.size(0); i += 1000) {
    int64_t end = std::min(x.size(0), i + 1000);
    auto pred = net->forward(x.slice(0, i, end)).argmax(1);
    correct += pred.eq(y.slice(0, i, end)).sum().item<int64_t>();
  }
  return x.size(0) > 0 ? double(correct) / double(x.size(0)) : 0.0;
}

// What one trainer reports (sent as doubles over the trainers-only communicator).
struct TrainerResult {
  double lr = 0, test_acc = 0, samples = 0, train_s = 0, wait_s = 0, batches = 0, loss = 0;
  static constexpr int kFields = 7;
};

// The size the test set is evaluated at: --eval-size, else the resize schedule's full size,
// else options.image_size (0: as stored).
int EvalSize(const DemoFlags& flags, const Options& o) {
  if (flags.eval_size > 0) return flags.eval_size;
  if (!o.resize.empty()) {
    auto spec = batchcast::schedule::ParseResizeSpec(o.resize);
    if (spec.ok()) return batchcast::schedule::BucketSizes(*spec).back();
  }
  return o.image_size;
}

// Evaluations during training, on the training-time clock (evaluation time excluded).
struct EvalPoint {
  double train_s = 0, wall_s = 0, accuracy = 0, samples = 0;
  uint64_t epoch = 0;
  double cpu_s = 0;  // CPU time of the training thread, evaluation excluded
};

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

class Evaluator {
 public:
  Evaluator(batchcast::Consumer& consumer, const std::pair<torch::Tensor, torch::Tensor>& test)
      : collector_(batchcast::internal::ConsumerAccess::GetCollector(consumer)), test_(test) {}
  double Run(Net& net, double train_s, double wall_s, double samples, uint64_t epoch,
             double cpu_s) {
    double acc = Evaluate(net, test_.first, test_.second);
    points_.push_back({train_s, wall_s, acc, samples, epoch, cpu_s});
    if (collector_ != nullptr) {
      collector_->SetGauge(batchcast::telemetry::Gauge::kEvalAccuracy, acc);
      collector_->Annotate(fmt::format("eval: train_s={:.2f} wall_s={:.2f} epoch={} samples={:.0f} "
                                       "accuracy={:.4f} cpu_s={:.2f}", train_s, wall_s, epoch,
                                       samples, acc, cpu_s));
    }
    return acc;
  }
  const std::vector<EvalPoint>& points() const { return points_; }

 private:
  batchcast::telemetry::Collector* collector_;
  const std::pair<torch::Tensor, torch::Tensor>& test_;
  std::vector<EvalPoint> points_;
};

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Result<TrainerResult> Train(batchcast::Consumer& consumer, double lr, const DemoFlags& flags,
                            const Options& o, std::vector<EvalPoint>* evals) {
  BC_ASSIGN_OR_RETURN(auto test, LoadTestSet(flags.test_dataset, flags.test_limit, EvalSize(flags, o)));
  Net net(flags.width);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  TrainerResult r;
  r.lr = lr;
  double loss_sum = 0;
  int64_t loss_n = 0;
  Evaluator evaluator(consumer, test);
  const auto t0 = Clock::now();
  Clock::duration paused{};  // evaluation time, not training time
  double next_eval = flags.eval_every_s;
  int64_t samples = 0;
  uint64_t epoch = 0;
  auto train_s = [&] { return Seconds(Clock::now() - t0 - paused); };
  const double cpu0 = ThreadCpuSeconds();
  double cpu_paused = 0;
  auto train_cpu = [&] { return ThreadCpuSeconds() - cpu0 - cpu_paused; };
  auto budget_clock = [&] { return flags.budget_cpu ? train_cpu() : train_s(); };
  batchcast::Batch batch;
  Status st;
  while ((st = consumer.Next(&batch)).ok()) {
    BC_ASSIGN_OR_RETURN(batchcast::TorchBatch t, batchcast::ToTorch(batch));
    const float lr_factor = batch.info().lr_factor;  // 1 without a resize schedule
    for (auto& group : opt.param_groups())
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr * lr_factor);
    epoch = batch.info().epoch;
    samples += batch.size();
    net->train();
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(Normalize(batchcast::AsNCHW(t))), t.labels);
    loss.backward();
    opt.step();
    loss_sum += loss.item<double>();
    ++loss_n;
    batch.Release();  // the tensors t still hold the slot until they go out of scope
    if (flags.eval_every_s > 0 && budget_clock() >= next_eval) {
      const auto e0 = Clock::now();
      const double c0 = ThreadCpuSeconds();
      evaluator.Run(net, train_s(), Seconds(e0 - t0), double(samples), epoch, train_cpu());
      paused += Clock::now() - e0;
      cpu_paused += ThreadCpuSeconds() - c0;
      next_eval += flags.eval_every_s;
    }
    if (flags.budget_s > 0 && budget_clock() >= flags.budget_s) {
      st = Status(StatusCode::kEndOfStream, "training-time budget spent");
      break;
    }
  }
  if (st.code() != StatusCode::kEndOfStream) return st;
  r.train_s = train_s();
  batchcast::ConsumerStats s = consumer.stats();
  r.samples = double(s.samples);
  r.batches = double(s.batches);
  r.wait_s = double(s.wait_ns) * 1e-9;
  r.loss = loss_n > 0 ? loss_sum / double(loss_n) : 0;
  r.test_acc = evaluator.Run(net, r.train_s, Seconds(Clock::now() - t0), double(samples), epoch,
                             train_cpu());
  *evals = evaluator.points();
  return r;
}

// CPU-seconds and memory of this process (all its threads).
// main_cpu_s is the main thread's share: the training loop on trainers, waiting in Serve()
// on a leader. The rest (cpu_s - main_cpu_s) is the data pipeline: decode workers, the
// leader thread and the data plane's control threads.
struct ProcessUsage {
  double cpu_s = 0, main_cpu_s = 0, maxrss_mib = 0, pss_mib = 0, is_leader = 0;
  static constexpr int kFields = 5;
};

ProcessUsage MeasureProcess(bool is_leader) {
  ProcessUsage u;
  u.is_leader = is_leader ? 1 : 0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  u.cpu_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
            double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  timespec main{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &main);  // called on the main thread
  u.main_cpu_s = double(main.tv_sec) + double(main.tv_nsec) * 1e-9;
  u.maxrss_mib = double(ru.ru_maxrss) / 1024.0;
  std::ifstream in("/proc/self/smaps_rollup");  // proportional set size: shared pages split
  for (std::string key; in >> key;) {
    if (key == "Pss:") {
      double kib = 0;
      in >> kib;
      u.pss_mib = kib / 1024.0;
      break;
    }
    in.ignore(1 << 12, '\n');
  }
  return u;
}

// Sharing off: this process runs its own leader on a thread and consumes from it.
class SoloStream {
 public:
  static Result<std::unique_ptr<SoloStream>> Create(const Options& options) {
    std::unique_ptr<SoloStream> s(new SoloStream());
    batchcast::producer::ProducerConfig cfg;
    cfg.options = options;
    cfg.expected_consumers = 1;
    cfg.max_consumer_batch = static_cast<uint32_t>(options.batch_size);
    cfg.job = "demo-solo";
    cfg.socket_name = "batchcast-" + std::to_string(getuid()) + "-demo-solo-" + std::to_string(getpid());
    BC_ASSIGN_OR_RETURN(auto source, batchcast::producer::MakePipelineSource(options));
    BC_ASSIGN_OR_RETURN(s->leader_, batchcast::producer::Producer::Create(cfg, std::move(source)));
    s->leader_->Start();
    auto c = batchcast::Consumer::Attach(cfg.socket_name, options, 0, "solo");
    if (!c.ok()) {
      s->leader_->Abort("the in-process consumer could not attach: " + c.status().message());
      return c.status();
    }
    s->consumer_ = std::move(c).value();
    return s;
  }
  ~SoloStream() {
    if (consumer_) consumer_->Detach().IgnoreError();
    if (leader_) leader_->Wait().IgnoreError();
  }
  batchcast::Consumer& consumer() { return *consumer_; }

 private:
  SoloStream() = default;
  std::unique_ptr<batchcast::producer::Producer> leader_;
  std::unique_ptr<batchcast::Consumer> consumer_;
};

void Fail(const Status& st) {
  std::fprintf(stderr, "sweep_trainer: %s\n", st.ToString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void PrintAndSave(const DemoFlags& flags, const Options& o, const std::vector<TrainerResult>& rs,
                  const std::vector<ProcessUsage>& us, int ranks, double wall_s,
                  const std::vector<EvalPoint>& evals) {
  const char* mode = flags.sharing ? "shared" : "independent";
  std::printf("\n== sweep, sharing %s: %zu trainers%s, %s, %d epoch(s), batch %d, decode threads %d%s\n",
              flags.sharing ? "ON" : "OFF", rs.size(), flags.sharing ? " + 1 leader" : "",
              o.dataset.c_str(), o.epochs, o.batch_size, o.threads,
              flags.sharing ? " (one leader)" : " per trainer");
  std::printf("%-8s %-8s %-9s %-9s %-10s %-11s %-8s %-8s\n", "trainer", "lr", "test_acc", "samples",
              "samples/s", "data_wait_s", "train_s", "loss");
  nlohmann::json j;
  j["mode"] = mode;
  double samples = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    const TrainerResult& r = rs[i];
    std::printf("%-8zu %-8.4g %-9.2f %-9.0f %-10.0f %-11.2f %-8.2f %-8.4f\n", i, r.lr,
                100.0 * r.test_acc, r.samples, r.samples / r.train_s, r.wait_s, r.train_s, r.loss);
    j["trainers"].push_back({{"lr", r.lr}, {"test_acc", r.test_acc}, {"samples", r.samples},
                             {"samples_per_s", r.samples / r.train_s}, {"data_wait_s", r.wait_s},
                             {"train_s", r.train_s}, {"loss", r.loss}});
    samples += r.samples;
  }
  double cpu = 0, data_cpu = 0, leader_cpu = 0, rss_sum = 0, rss_max = 0, pss = 0;
  for (const ProcessUsage& u : us) {
    cpu += u.cpu_s;
    data_cpu += u.cpu_s - u.main_cpu_s;
    if (u.is_leader != 0) leader_cpu += u.cpu_s;
    rss_sum += u.maxrss_mib;
    rss_max = std::max(rss_max, u.maxrss_mib);
    pss += u.pss_mib;
  }
  std::printf("job: %d ranks, wall %.1f s, cpu %.1f s, %.1f us cpu/sample, peak rss %.0f MiB "
              "summed (max rank %.0f MiB), pss %.0f MiB summed\n",
              ranks, wall_s, cpu, 1e6 * cpu / samples, rss_sum, rss_max, pss);
  std::printf("data pipeline (all threads but the main ones): %.1f s cpu, %.1f us cpu/sample%s\n",
              data_cpu, 1e6 * data_cpu / samples,
              flags.sharing ? fmt::format(" (leader rank: {:.1f} s in all)", leader_cpu).c_str() : "");
  j["ranks"] = ranks;
  j["wall_s"] = wall_s;
  j["cpu_s"] = cpu;
  j["samples"] = samples;
  j["cpu_s_per_sample"] = cpu / samples;
  j["data_cpu_s"] = data_cpu;
  j["data_cpu_s_per_sample"] = data_cpu / samples;
  j["maxrss_sum_mib"] = rss_sum;
  j["maxrss_max_mib"] = rss_max;
  j["pss_sum_mib"] = pss;
  j["decode_threads_total"] = flags.sharing ? o.threads : o.threads * int(rs.size());
  j["resize"] = o.resize;
  j["budget_s"] = flags.budget_s;
  for (const EvalPoint& e : evals)  // the first trainer's evaluations during training
    j["evals_trainer0"].push_back({{"train_s", e.train_s}, {"wall_s", e.wall_s},
                                   {"epoch", e.epoch}, {"samples", e.samples},
                                   {"accuracy", e.accuracy}, {"cpu_s", e.cpu_s}});
  if (!flags.results.empty()) std::ofstream(flags.results) << j.dump() << "\n";
  std::fflush(stdout);
}

// Gathers every trainer's result (trainers-only communicator) and every rank's usage
// (world, leaders included) on the first trainer, which prints them.
void Report(const DemoFlags& flags, const Options& o, MPI_Comm trainers, const TrainerResult* mine,
            double wall_s, const std::vector<EvalPoint>& evals) {
  int world_rank = 0, world_size = 0, trank = -1, tsize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::vector<TrainerResult> rs;
  if (trainers != MPI_COMM_NULL) {
    MPI_Comm_rank(trainers, &trank);
    MPI_Comm_size(trainers, &tsize);
    rs.resize(size_t(tsize));
    if (MPI_Gather(mine, TrainerResult::kFields, MPI_DOUBLE, rs.data(), TrainerResult::kFields,
                   MPI_DOUBLE, 0, trainers) != MPI_SUCCESS)
      Fail(Status(StatusCode::kInternal, "MPI_Gather of trainer results failed"));
  }
  int root = trank == 0 ? world_rank : INT_MAX, printer = 0;
  if (MPI_Allreduce(&root, &printer, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
    Fail(Status(StatusCode::kInternal, "MPI_Allreduce (printer rank) failed"));
  ProcessUsage u = MeasureProcess(trainers == MPI_COMM_NULL);
  std::vector<ProcessUsage> us(static_cast<size_t>(world_size));
  if (MPI_Gather(&u, ProcessUsage::kFields, MPI_DOUBLE, us.data(), ProcessUsage::kFields, MPI_DOUBLE,
                 printer, MPI_COMM_WORLD) != MPI_SUCCESS)
    Fail(Status(StatusCode::kInternal, "MPI_Gather of process usage failed"));
  if (world_rank == printer) PrintAndSave(flags, o, rs, us, world_size, wall_s, evals);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;  // replicate mode across nodes exchanges from the leader thread
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  torch::set_num_threads(1);
  torch::set_num_interop_threads(1);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  std::vector<std::string> rest;
  auto opts = batchcast::ResolveOptions(std::vector<std::string>(argv + 1, argv + argc), &rest);
  if (!opts.ok()) Fail(opts.status());
  Options o = std::move(opts).value();
  DemoFlags flags;
  if (Status st = ParseDemoFlags(rest, &flags); !st.ok()) Fail(st);
  torch::manual_seed(1234);  // same initial weights for every trial: only lr differs
  std::vector<EvalPoint> evals;

  if (flags.sharing) {
    auto rt = batchcast::Runtime::Create(o);
    if (!rt.ok()) Fail(rt.status());
    TrainerResult r;
    if ((*rt)->is_trainer()) {
      int trank = 0;
      MPI_Comm_rank((*rt)->trainer_comm(), &trank);
      auto res = Train((*rt)->consumer(), flags.lrs[size_t(trank) % flags.lrs.size()], flags, o,
                       &evals);
      if (!res.ok()) Fail(res.status());
      r = *res;
      if (Status st = (*rt)->consumer().Detach(); !st.ok()) Fail(st);
    } else if (Status st = (*rt)->Serve(); !st.ok()) {
      Fail(st);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    Report(flags, o, (*rt)->trainer_comm(), &r, MPI_Wtime() - t0, evals);
    if (Status st = (*rt)->Finalize(); !st.ok()) Fail(st);
  } else {
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    o.threads = std::max(1, (o.threads > 0 ? o.threads : int(std::thread::hardware_concurrency())) / size);
    TrainerResult r;
    {
      auto solo = SoloStream::Create(o);
      if (!solo.ok()) Fail(solo.status());
      auto res = Train((*solo)->consumer(), flags.lrs[size_t(rank) % flags.lrs.size()], flags, o,
                       &evals);
      if (!res.ok()) Fail(res.status());
      r = *res;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm trainers = MPI_COMM_NULL;  // every rank trains: the trainers are the world
    MPI_Comm_dup(MPI_COMM_WORLD, &trainers);
    Report(flags, o, trainers, &r, MPI_Wtime() - t0, evals);
    MPI_Comm_free(&trainers);
  }
  MPI_Finalize();
  return 0;
}
