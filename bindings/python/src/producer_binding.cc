// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// _batchcast._Producer (batches from Python into the data plane, through
// node::ExternalProducer) and _batchcast._Leader (the native pipeline leader on a
// background thread). Every wait is bounded and checks for KeyboardInterrupt.
#include <pybind11/stl.h>

#include <unistd.h>

#include <cstring>
#include <thread>

#include "bindings/python/src/bindings.h"
#include "core/log.h"
#include "core/option_scope.h"
#include "producer/batch_source.h"
#include "node/external_producer.h"
#include "node/leader.h"

namespace batchcast::python {
namespace {

pipeline::DType ParseDType(const std::string& s) {
  if (s == "uint8") return pipeline::DType::kUint8;
  if (s == "float32") return pipeline::DType::kFloat32;
  throw StatusError(Status(StatusCode::kInvalidArgument,
                           "producer: image dtype '" + s + "' is not supported; use uint8 or "
                           "float32 (convert the batch first)"));
}

// Copies a C-contiguous array of `expect` elements of T into dst with the GIL released.
template <typename T>
void CopyInto(const py::handle& obj, void* dst, int64_t n, int64_t per_sample, const char* what) {
  auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!a) throw py::error_already_set();
  if (a.ndim() < 1 || a.shape(0) != n || a.size() != n * per_sample)
    throw StatusError(Status(
        StatusCode::kInvalidArgument,
        std::string("producer: ") + what + " has " + std::to_string(a.size()) + " elements in " +
            std::to_string(a.ndim()) + " dimensions, expected " + std::to_string(n) + " x " +
            std::to_string(per_sample) + "; every batch must have the first batch's sample shape"));
  const void* src = a.data();
  size_t bytes = size_t(n * per_sample) * sizeof(T);
  py::gil_scoped_release nogil;
  std::memcpy(dst, src, bytes);
}

// One dict per consumer entry in use, as the leader sees it (its membership table).
py::list MemberDicts(const shm::RingLeader& ring) {
  py::list out;
  for (const shm::MemberInfo& m : ring.Members()) {
    py::dict d;
    d["id"] = m.id;
    d["state"] = shm::MemberStateName(m.state);
    d["pid"] = m.pid;
    d["rank"] = m.rank;
    d["name"] = m.name;
    d["batch_size"] = m.batch_size;
    d["buffer_depth"] = m.buffer_depth;
    d["batches"] = m.batches;
    d["wait_ns"] = m.wait_ns;
    out.append(d);
  }
  return out;
}

class PyProducer {
 public:
  PyProducer(std::vector<int> sample_shape, const std::string& dtype, int64_t producer_batch,
             int64_t epoch_samples, int max_consumer_batch, int ring_slots,
             const std::string& address, int64_t epochs, py::dict options, int rank,
             py::list tensors) {
    // `options`: the Producer's keyword options over BATCHCAST_* and the config file. It
    // reads ring_slots (over `ring_slots`, its default from buffer_depth) and the options
    // every front door reads (heartbeat_ms, telemetry and its tags); any other leader option
    // would be ignored, so it is refused wherever it was set.
    Options o = OptionsFromKwargs(options);
    ThrowIfError(CheckPublisherOptions(
        o, "batchcast.Producer", {"ring_slots"},
        "Unset it, or use batchcast.Leader(dataset=...) for the native decode pipeline; the "
        "Producer's own settings are its keyword arguments (docs/python.md)"));
    if (sample_shape.size() != 3 && !(sample_shape.empty() && !tensors.empty()))
      throw StatusError(Status(StatusCode::kInvalidArgument,
                               "producer: sample_shape must be (channels, height, width)"));
    node::ExternalProducerConfig c;
    if (!sample_shape.empty()) {  // empty: batches of named tensors without images
      c.layout.channels = sample_shape[0];
      c.layout.height = sample_shape[1];
      c.layout.width = sample_shape[2];
    }
    c.layout.dtype = ParseDType(dtype);
    c.tensors = TensorSpecsFromPython(tensors);
    c.producer_batch = producer_batch;
    c.epoch_samples = epoch_samples;
    c.epochs = epochs;
    c.max_consumer_batch = static_cast<uint32_t>(max_consumer_batch);
    c.batch_limit_advice =
        "create the batchcast.Producer with max_batch_size= the largest consumer batch_size "
        "(at most its batch_size, the samples of one published batch), or ask for a smaller "
        "batch_size";
    c.ring_slots = static_cast<uint32_t>(o.ring_slots > 0 ? o.ring_slots : ring_slots);
    c.heartbeat_ms = o.heartbeat_ms;
    c.socket_name = address.empty() ? NewAddress("producer") : address;
    c.job = "python";
    telemetry_ = std::make_unique<ProcessTelemetry>(o, rank, telemetry::Role::kLeader,
                                                    telemetry::ProcessKind::kProducer);
    c.collector = telemetry_->collector();
    per_sample_ = int64_t(c.layout.channels) * c.layout.height * c.layout.width;
    float_ = c.layout.dtype == pipeline::DType::kFloat32;
    p_ = ValueOrThrow(node::ExternalProducer::Create(c));
  }
  ~PyProducer() {
    if (getpid() == pid_) return;
    AbandonInForkedChild(p_);  // a forked child must not end the parent's stream
    AbandonInForkedChild(telemetry_);
  }

  std::string address() const { return p_->address(); }

  // Waits until n consumers have joined (timeout_s < 0: forever) and admits them.
  void WaitForConsumers(int n, double timeout_s) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    Status last;
    WaitInterruptibly([&](int64_t chunk_ms) {
      last = p_->WaitForConsumers(n, chunk_ms);
      if (last.code() != StatusCode::kDeadlineExceeded) return true;
      return timeout_s >= 0 && std::chrono::steady_clock::now() >= deadline;
    });
    if (last.code() == StatusCode::kDeadlineExceeded)
      throw StatusError(Status(StatusCode::kDeadlineExceeded,
                               "producer: " + std::to_string(n) + " consumer(s) did not join '" +
                                   p_->address() + "' within " + std::to_string(timeout_s) + " s"));
    ThrowIfError(last);
  }

  // Acquires the next slot (waiting on backpressure) and copies one batch into it.
  void Stage(py::handle images, py::handle labels, py::handle ids, py::list named) {
    if (staged_) throw StatusError(Status(StatusCode::kFailedPrecondition,
                                          "producer: a batch is already staged; commit it first"));
    int64_t n = py::len(labels);
    if (n <= 0 || n > p_->config().producer_batch)
      throw StatusError(Status(
          StatusCode::kInvalidArgument,
          "producer: a batch of " + std::to_string(n) + " samples; batches must hold 1 to " +
              std::to_string(p_->config().producer_batch) + " (the first batch's size or "
              "batch_size)"));
    Status last;
    WaitInterruptibly([&](int64_t chunk_ms) {
      auto r = p_->Begin(chunk_ms);
      last = r.status();
      if (r.ok()) slot_ = *r;
      return last.code() != StatusCode::kDeadlineExceeded;
    });
    ThrowIfError(last);
    if (per_sample_ == 0 && !images.is_none())
      throw StatusError(Status(StatusCode::kInvalidArgument,
                               "producer: this batch has images but the first had none; every "
                               "batch must have the first batch's tensors"));
    if (per_sample_ > 0 && float_) CopyInto<float>(images, slot_.images, n, per_sample_, "images");
    else if (per_sample_ > 0) CopyInto<uint8_t>(images, slot_.images, n, per_sample_, "images");
    CopyNamedTensors(named, p_->config().tensors, slot_.tensors, n);
    CopyInto<int64_t>(labels, slot_.labels, n, 1, "labels");
    ids_written_ = !ids.is_none();
    if (ids_written_) CopyInto<int64_t>(ids, slot_.ids, n, 1, "sample ids");
    staged_n_ = n;
    staged_ = true;
  }

  void Commit(uint64_t epoch, uint64_t batch_in_epoch, bool last_in_epoch, float lr_factor) {
    if (!staged_) throw StatusError(Status(StatusCode::kFailedPrecondition,
                                           "producer: nothing staged to commit"));
    staged_ = false;
    node::ExternalCommit c{epoch, batch_in_epoch, staged_n_, last_in_epoch, lr_factor};
    ThrowIfError(p_->Commit(slot_, c, ids_written_));
  }

  int AdmitJoining() { return p_->AdmitJoining(); }
  int active() const { return p_->active_consumers(); }
  int joining() const { return p_->joining_consumers(); }
  // Ending or failing the stream also finishes the telemetry (files and summary).
  void End() {
    p_->End();
    ThrowIfError(telemetry_->Finish());
  }
  void Fail(const std::string& why) {
    p_->Fail(why);
    ThrowIfError(telemetry_->Finish());
  }

  py::dict Stats() {
    node::ExternalProducerStats s = p_->stats();
    py::dict d;
    d["batches"] = s.batches;
    d["samples"] = s.samples;
    d["dropped_batches"] = s.dropped_batches;
    d["tail_copies"] = s.tail_copies;
    d["slot_wait_ns"] = s.slot_wait_ns;
    d["ring_slots"] = p_->config().ring_slots;
    d["heartbeat_ms"] = p_->config().heartbeat_ms;
    d["consumers"] = MemberDicts(p_->ring());
    d["telemetry_summary"] = telemetry_->summary();
    return d;
  }

 private:
  pid_t pid_ = getpid();
  std::unique_ptr<ProcessTelemetry> telemetry_;  // outlives p_, which records into it
  std::unique_ptr<node::ExternalProducer> p_;
  node::ExternalSlot slot_;
  bool staged_ = false, ids_written_ = false, float_ = false;
  int64_t staged_n_ = 0, per_sample_ = 0;
};

// The native pipeline leader on a background thread.
class PyLeader {
 public:
  PyLeader(py::dict kwargs, int expected_consumers, int max_consumer_batch,
           const std::string& address, bool end_when_empty, int64_t join_timeout_ms, int rank) {
    node::LeaderConfig cfg;
    cfg.options = OptionsFromKwargs(kwargs);
    ThrowIfError(CheckLeaderOptions(cfg.options, "batchcast.Leader",
                                    "batchcast.Consumer(address, ...)"));
    ThrowIfError(CheckSharedStreamOptions(cfg.options, "batchcast.Leader",
                                          "batchcast.Consumer(address, ...)"));
    cfg.rank = rank;
    telemetry_ = std::make_unique<ProcessTelemetry>(cfg.options, rank, telemetry::Role::kLeader,
                                                    telemetry::ProcessKind::kLeader);
    cfg.collector = telemetry_->collector();
    cfg.expected_consumers = expected_consumers;
    cfg.max_consumer_batch = static_cast<uint32_t>(max_consumer_batch);
    cfg.batch_limit_advice =
        "create the batchcast.Leader with max_batch_size= the largest consumer batch_size "
        "(default: its batch_size), or ask for a smaller batch_size";
    cfg.socket_name = address.empty() ? NewAddress("leader") : address;
    cfg.job = "python";
    cfg.end_when_empty = end_when_empty;
    cfg.join_timeout_ms = join_timeout_ms;
    std::unique_ptr<producer::BatchSource> source =
        ValueOrThrow(producer::MakePipelineSource(cfg.options));
    leader_ = ValueOrThrow(node::Leader::Create(cfg, std::move(source)));
    // A consumer that dies or stops heart-beating is detached (the stream goes on for the
    // others) and reported by wait() once the stream is complete.
    leader_->ring().SetLossHandler([this](const shm::MemberInfo& m, shm::LossKind kind) {
      if (kind == shm::LossKind::kDetached) return;
      std::lock_guard<std::mutex> lock(mu_);
      lost_.push_back(m.Describe() + (kind == shm::LossKind::kHeartbeat
                                          ? " stopped heart-beating"
                                          : " died (its connection closed)"));
    });
    thread_ = std::thread([this] {
      Status st = leader_->Run();
      Status written = telemetry_->Finish();  // the stream is over: files and summary
      if (st.ok()) st = written;
      else if (!written.ok()) BC_LOG(Error, Telem, "leader telemetry: {}", written.ToString());
      std::lock_guard<std::mutex> lock(mu_);
      status_ = st;
      done_ = true;
      cv_.notify_all();
    });
  }
  ~PyLeader() { Close(); }

  std::string address() const { return leader_->address(); }
  int64_t producer_batch() const { return leader_->producer_batch(); }

  // Blocks until the stream is complete; raises the leader's error. timeout_s < 0: forever.
  bool Wait(double timeout_s) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    WaitInterruptibly([&](int64_t chunk_ms) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(chunk_ms), [&] { return done_; });
      return done_ || (timeout_s >= 0 && std::chrono::steady_clock::now() >= deadline);
    });
    std::lock_guard<std::mutex> lock(mu_);
    if (done_ && !status_.ok() && status_.code() != StatusCode::kCancelled) ThrowIfError(status_);
    if (done_ && !lost_.empty()) {
      std::string who;
      for (const auto& l : lost_) who += (who.empty() ? "" : "; ") + l;
      ThrowIfError(Status(
          StatusCode::kUnavailable,
          "leader at " + leader_->address() + ": the stream is complete, but " +
              std::to_string(lost_.size()) + " consumer(s) were lost before their end: " + who +
              ". They did not receive every batch (the others did); see their own output. "
              "stats()['lost_consumers'] lists them"));
    }
    return done_;
  }

  void Close() {
    if (getpid() != pid_) {  // a forked child: not its stream to stop, nor its thread
      AbandonInForkedChild(thread_);
      AbandonInForkedChild(leader_);
      AbandonInForkedChild(telemetry_);
      return;
    }
    if (!thread_.joinable()) return;
    bool done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done = done_;
    }
    if (!done) leader_->Abort("leader: closed from Python before the end of the stream");
    py::gil_scoped_release nogil;
    thread_.join();
  }

  // Everything the C++ leader knows: the slot writer's counters, late joins, the stream's
  // shape, every consumer entry in use, and the telemetry summary once written.
  py::dict Stats() {
    node::LeaderStats s = leader_->stats();
    py::dict d;
    d["producer_batches"] = s.producer_batches;
    d["samples_produced"] = s.samples_produced;
    d["samples_decoded"] = s.samples_decoded;
    d["samples_skipped"] = s.samples_skipped;
    d["tail_copies"] = s.tail_copies;
    d["empty_positions"] = s.empty_positions;
    d["dropped_batches"] = s.dropped_batches;
    d["slot_wait_ns"] = s.slot_wait_ns;
    d["max_slot_wait_ns"] = s.max_slot_wait_ns;
    d["fill_ns"] = s.fill_ns;
    d["replayed_batches"] = s.replayed_batches;
    d["late_joins"] = s.late_joins;
    d["producer_batch"] = leader_->producer_batch();
    d["consumers"] = MemberDicts(leader_->ring());
    {
      std::lock_guard<std::mutex> lock(mu_);
      d["done"] = done_;
      d["status"] = done_ ? status_.ToString() : std::string();
      d["lost_consumers"] = lost_;
    }
    d["telemetry_summary"] = telemetry_->summary();
    return d;
  }

 private:
  pid_t pid_ = getpid();
  std::unique_ptr<ProcessTelemetry> telemetry_;  // outlives leader_, which records into it
  std::unique_ptr<node::Leader> leader_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  std::vector<std::string> lost_;  // consumers that died or stopped heart-beating
};

}  // namespace

void BindProducer(py::module_& m) {
  py::class_<PyProducer>(m, "_Producer")
      .def(py::init<std::vector<int>, const std::string&, int64_t, int64_t, int, int,
                    const std::string&, int64_t, py::dict, int, py::list>(),
           py::arg("sample_shape"), py::arg("dtype"), py::arg("producer_batch"),
           py::arg("epoch_samples"), py::arg("max_consumer_batch"), py::arg("ring_slots"),
           py::arg("address") = "", py::arg("epochs") = 0,
           py::arg("options") = py::dict(), py::arg("rank") = -1, py::arg("tensors") = py::list())
      .def_property_readonly("address", &PyProducer::address)
      .def("wait_for_consumers", &PyProducer::WaitForConsumers, py::arg("n"),
           py::arg("timeout_s") = -1.0)
      .def("stage", &PyProducer::Stage, py::arg("images"), py::arg("labels"),
           py::arg("ids") = py::none(), py::arg("named") = py::list())
      .def("commit", &PyProducer::Commit, py::arg("epoch"), py::arg("batch_in_epoch"),
           py::arg("last_in_epoch"), py::arg("lr_factor") = 1.0f)
      .def("admit_joining", &PyProducer::AdmitJoining)
      .def_property_readonly("active_consumers", &PyProducer::active)
      .def_property_readonly("joining_consumers", &PyProducer::joining)
      .def("end", &PyProducer::End)
      .def("fail", &PyProducer::Fail)
      .def("stats", &PyProducer::Stats);
}

void BindLeader(py::module_& m) {
  py::class_<PyLeader>(m, "_Leader")
      .def(py::init<py::dict, int, int, const std::string&, bool, int64_t, int>(),
           py::arg("options"), py::arg("expected_consumers") = 1,
           py::arg("max_consumer_batch") = 0, py::arg("address") = "",
           py::arg("end_when_empty") = true, py::arg("join_timeout_ms") = 120000,
           py::arg("rank") = -1)
      .def_property_readonly("address", &PyLeader::address)
      .def_property_readonly("producer_batch", &PyLeader::producer_batch)
      .def("wait", &PyLeader::Wait, py::arg("timeout_s") = -1.0)
      .def("close", &PyLeader::Close)
      .def("stats", &PyLeader::Stats);
}

}  // namespace batchcast::python
