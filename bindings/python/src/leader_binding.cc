// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// _batchcast._Leader: the native pipeline leader of a Python process, node::CreateNodeProducer
// (the options check, GPU staging) run on the Producer's own thread. What is Python's own: an
// interruptible wait, closing from Python, fork safety.
#include <unistd.h>

#include "bindings/python/src/bindings.h"
#include "core/option_scope.h"
#include "node/front_door.h"
#include "producer/producer.h"

namespace batchcast::python {
namespace {

// The native pipeline leader on a background thread (Producer::Start).
class PyLeader {
 public:
  PyLeader(py::dict kwargs, int expected_consumers, int max_consumer_batch,
           const std::string& address, bool end_when_empty, int64_t join_timeout_ms, int rank) {
    producer::ProducerConfig cfg;
    cfg.front_door = FrontDoor::kPythonLeader;
    cfg.options = OptionsFromKwargs(kwargs);
    cfg.rank = rank;
    cfg.expected_consumers = expected_consumers;
    cfg.max_consumer_batch = static_cast<uint32_t>(max_consumer_batch);
    cfg.socket_name = address.empty() ? producer::NewSocketName("python-leader") : address;
    cfg.job = "python";
    cfg.end_when_empty = end_when_empty;
    cfg.join_timeout_ms = join_timeout_ms;
    producer_ = ValueOrThrow(node::CreateNodeProducer(cfg));
    producer_->Start();
  }
  ~PyLeader() { Close(); }

  std::string address() const { return producer_->address(); }
  int64_t producer_batch() const { return producer_->producer_batch(); }

  // Blocks until the stream is complete; raises the leader's error. timeout_s < 0: forever.
  bool Wait(double timeout_s) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    Status st;
    WaitInterruptibly([&](int64_t chunk_ms) {
      st = producer_->Wait(chunk_ms);
      if (st.code() != StatusCode::kDeadlineExceeded || producer_->done()) return true;
      return timeout_s >= 0 && std::chrono::steady_clock::now() >= deadline;
    });
    const bool done = producer_->done();
    if (done && !st.ok() && st.code() != StatusCode::kCancelled) ThrowIfError(st);
    // A consumer that died or stopped heart-beating was detached and the stream went on for
    // the others (LossPolicy::kCount): the caller learns of it here.
    const std::vector<std::string> lost = done ? producer_->lost_consumers()
                                               : std::vector<std::string>();
    if (!lost.empty()) {
      std::string who;
      for (const auto& l : lost) who += (who.empty() ? "" : "; ") + l;
      ThrowIfError(Status(
          StatusCode::kUnavailable,
          "leader at " + producer_->address() + ": the stream is complete, but " +
              std::to_string(lost.size()) + " consumer(s) were lost before their end: " + who +
              ". They did not receive every batch (the others did); see their own output. "
              "stats()['lost_consumers'] lists them"));
    }
    return done;
  }

  void Close() {
    if (getpid() != pid_) {  // a forked child: not its stream to stop, nor its thread
      AbandonInForkedChild(producer_);
      return;
    }
    if (producer_ == nullptr || closed_) return;
    closed_ = true;
    if (!producer_->done())
      producer_->Abort("leader: closed from Python before the end of the stream");
    WithoutGil([&] { producer_->Wait().IgnoreError(); });
  }

  py::dict Stats() {
    py::dict d = ProducerStatsDict(*producer_);
    const bool done = producer_->done();
    d["done"] = done;
    d["status"] = done ? producer_->Wait(0).ToString() : std::string();
    return d;
  }

 private:
  pid_t pid_ = getpid();
  std::unique_ptr<producer::Producer> producer_;
  bool closed_ = false;
};

}  // namespace

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
