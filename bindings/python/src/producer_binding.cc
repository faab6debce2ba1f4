// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// _batchcast._Producer: batches from a Python iterable, through a producer::Producer over an
// external feed whose BatchMaker is the iterator. The epoch loop, late join (the Producer
// keeps copies of an epoch's first batches for a late joiner's replay), resume, telemetry and
// the options check are the Producer's, as for every front door; what is Python's own is the
// iterator. Every wait is bounded and checks for KeyboardInterrupt.
#include <pybind11/stl.h>

#include <unistd.h>

#include <cstring>
#include <deque>

#include "bindings/python/src/bindings.h"
#include "core/option_scope.h"
#include "producer/feed.h"
#include "producer/producer.h"

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

// The Python iterator as the external feed's batch maker. Producer.py's _begin(epoch) starts a
// pass over the iterable and _fetch() returns its next batch as (images, labels, ids,
// [named arrays]) or None at the end. The maker holds what it fetched until the feed writes
// it into a slot. A Python exception is kept (raised again by run()) and fails the stream
// with its message, so that consumers never hang.
class IteratorMaker final : public producer::BatchMaker {
 public:
  IteratorMaker(py::object owner, const producer::ExternalFeedConfig& config)
      : owner_(std::move(owner)),
        per_sample_(int64_t(config.layout.channels) * config.layout.height * config.layout.width),
        float_(config.layout.dtype == pipeline::DType::kFloat32),
        specs_(config.tensors) {}
  ~IteratorMaker() override {
    py::gil_scoped_acquire gil;
    held_.clear();
    owner_ = py::object();
  }

  Status BeginEpoch(uint64_t epoch) override {
    return Call([&] {
      held_.clear();
      owner_.attr("_begin")(epoch);
    });
  }
  Status Fetch(bool* got) override {
    return Call([&] {
      py::object item = owner_.attr("_fetch")();
      *got = !item.is_none();
      if (*got) held_.push_back(item.cast<py::tuple>());
    });
  }
  Status Next(const producer::ExternalSlot& slot, producer::ExternalBatch* batch) override {
    return Call([&] {
      py::tuple item = std::move(held_.front());
      held_.pop_front();
      const py::object images = item[0], labels = item[1], ids = item[2];
      const int64_t n = static_cast<int64_t>(py::len(labels));
      if (n <= 0 || n > slot.capacity)
        throw StatusError(Status(
            StatusCode::kInvalidArgument,
            "producer: a batch of " + std::to_string(n) + " samples; batches must hold 1 to " +
                std::to_string(slot.capacity) + " (the first batch's size or batch_size)"));
      if (per_sample_ == 0 && !images.is_none())
        throw StatusError(Status(StatusCode::kInvalidArgument,
                                 "producer: this batch has images but the first had none; every "
                                 "batch must have the first batch's tensors"));
      if (per_sample_ > 0 && float_) CopyInto<float>(images, slot.images, n, per_sample_, "images");
      else if (per_sample_ > 0) CopyInto<uint8_t>(images, slot.images, n, per_sample_, "images");
      CopyNamedTensors(item[3].cast<py::list>(), specs_, slot, n);
      CopyInto<int64_t>(labels, slot.labels, n, 1, "labels");
      batch->ids_written = !ids.is_none();
      if (batch->ids_written) CopyInto<int64_t>(ids, slot.ids, n, 1, "sample ids");
      batch->num_samples = n;
    });
  }
  int64_t Drop() override {
    py::gil_scoped_acquire gil;
    int64_t n = static_cast<int64_t>(py::len(held_.front()[1]));
    held_.pop_front();
    return n;
  }
  // Before every position and every 200 ms of a wait: Ctrl-C stops the stream.
  Status Poll() {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return Status::Ok();
    Keep(py::error_already_set());
    return CancelledError("producer: stopped by KeyboardInterrupt");
  }
  // The Python exception that stopped the stream, raised again in the caller's thread.
  void RaiseKept() {
    if (error_ == nullptr) return;
    std::unique_ptr<py::error_already_set> e = std::move(error_);
    e->restore();
    throw py::error_already_set();
  }

 private:
  template <typename F>
  Status Call(F&& f) {
    py::gil_scoped_acquire gil;
    try {
      f();
      return Status::Ok();
    } catch (py::error_already_set& e) {
      std::string what = e.what();
      Keep(std::move(e));
      return InvalidArgumentError("producer: the iterable raised {}", what);
    } catch (const StatusError& e) {
      return Status(e.code(), e.what());
    } catch (const std::exception& e) {
      return InternalError("producer: {}", e.what());
    }
  }
  void Keep(py::error_already_set&& e) {
    if (error_ == nullptr) error_ = std::make_unique<py::error_already_set>(std::move(e));
  }

  py::object owner_;
  std::deque<py::tuple> held_;
  int64_t per_sample_;
  bool float_;
  std::vector<producer::TensorSpec> specs_;
  std::unique_ptr<py::error_already_set> error_;
};

class PyProducer {
 public:
  PyProducer(py::object owner, std::vector<int> sample_shape, const std::string& dtype,
             int64_t producer_batch, int64_t epoch_samples, int max_consumer_batch,
             const std::string& address, py::dict options, int rank, py::list tensors,
             int consumers, bool end_when_empty, int64_t join_timeout_ms) {
    if (sample_shape.size() != 3 && !(sample_shape.empty() && !tensors.empty()))
      throw StatusError(Status(StatusCode::kInvalidArgument,
                               "producer: sample_shape must be (channels, height, width)"));
    producer::ExternalFeedConfig feed;
    if (!sample_shape.empty()) {  // empty: batches of named tensors without images
      feed.layout.channels = sample_shape[0];
      feed.layout.height = sample_shape[1];
      feed.layout.width = sample_shape[2];
    }
    feed.layout.dtype = ParseDType(dtype);
    feed.tensors = TensorSpecsFromPython(tensors);
    feed.producer_batch = producer_batch;
    feed.epoch_samples = epoch_samples;
    feed.max_consumer_batch = static_cast<uint32_t>(max_consumer_batch);
    producer::ProducerConfig cfg;
    cfg.front_door = FrontDoor::kPythonProducer;
    cfg.options = OptionsFromKwargs(options);
    cfg.who = "producer";
    cfg.socket_name = address.empty() ? producer::NewSocketName("python-producer") : address;
    cfg.job = "python";
    cfg.rank = rank;
    cfg.max_consumer_batch = static_cast<uint32_t>(max_consumer_batch);
    cfg.expected_consumers = consumers;
    cfg.end_when_empty = end_when_empty;
    cfg.join_timeout_ms = join_timeout_ms;
    auto maker = std::make_unique<IteratorMaker>(std::move(owner), feed);
    maker_ = maker.get();
    cfg.poll = [m = maker_] { return m->Poll(); };
    producer_ = ValueOrThrow(producer::Producer::Create(
        cfg, producer::MakeExternalFeed(feed, std::move(maker)),
        producer::MakeLocalDistribution()));
  }
  ~PyProducer() {
    if (getpid() == pid_) return;
    AbandonInForkedChild(producer_);  // a forked child must not end the parent's stream
  }

  std::string address() const { return producer_->address(); }

  // The whole stream on the calling thread (producer.py's run(), or its start() thread),
  // without the GIL except inside the iterator.
  py::dict Run() {
    Status st = WithoutGil([&] { return producer_->Run(); });
    maker_->RaiseKept();
    ThrowIfError(st);
    return ProducerStatsDict(*producer_);
  }
  void Fail(const std::string& why) { producer_->Abort(why); }
  py::dict Stats() { return ProducerStatsDict(*producer_); }

 private:
  pid_t pid_ = getpid();
  IteratorMaker* maker_ = nullptr;  // owned by producer_'s feed
  std::unique_ptr<producer::Producer> producer_;
};

}  // namespace

// One dict per consumer entry in use, as the leader sees it (its membership table).
static py::list MemberDicts(const shm::RingLeader& ring) {
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

// Everything the Producer knows: the slot writer's counters, late joins and replays, every
// consumer entry in use, the telemetry summary once written.
py::dict ProducerStatsDict(producer::Producer& p) {
  const producer::ProducerStats s = p.stats();
  py::dict d;
  d["producer_batches"] = s.producer_batches;
  d["batches"] = s.producer_batches;
  d["samples_produced"] = s.samples_produced;
  d["samples"] = s.samples_produced;
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
  d["resume_replays"] = s.resume_replays;
  d["resume_replayed_batches"] = s.resume_replayed_batches;
  d["catch_ups"] = s.catch_ups;
  d["catch_up_replayed_batches"] = s.catch_up_replayed_batches;
  d["catch_up_deferrals"] = s.catch_up_deferrals;
  d["consumers_lost"] = s.consumers_lost;
  d["lost_consumers"] = p.lost_consumers();
  d["producer_batch"] = p.producer_batch();
  d["ring_slots"] = p.ring().config().num_slots;
  d["heartbeat_ms"] = p.config().options.heartbeat_ms;
  d["consumers"] = MemberDicts(p.ring());
  d["telemetry_summary"] = p.telemetry_summary();
  return d;
}

void BindProducer(py::module_& m) {
  py::class_<PyProducer>(m, "_Producer")
      .def(py::init<py::object, std::vector<int>, const std::string&, int64_t, int64_t, int,
                    const std::string&, py::dict, int, py::list, int, bool, int64_t>(),
           py::arg("owner"), py::arg("sample_shape"), py::arg("dtype"), py::arg("producer_batch"),
           py::arg("epoch_samples"), py::arg("max_consumer_batch"), py::arg("address") = "",
           py::arg("options") = py::dict(), py::arg("rank") = -1, py::arg("tensors") = py::list(),
           py::arg("consumers") = 1, py::arg("end_when_empty") = true,
           py::arg("join_timeout_ms") = -1)
      .def_property_readonly("address", &PyProducer::address)
      .def("run", &PyProducer::Run)
      .def("fail", &PyProducer::Fail)
      .def("stats", &PyProducer::Stats);
}

}  // namespace batchcast::python
