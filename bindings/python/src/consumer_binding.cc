// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// _batchcast._Consumer: a batchcast::Consumer whose blocking Next() runs on a helper
// thread, so the Python thread can wait in bounded chunks with the GIL released and
// still see KeyboardInterrupt. An interrupted request is not lost: the next call
// collects its batch. Zero copy: tensors are DLPack views of the slot (read-only numpy
// views), or, with copy=true, private arrays the batch was copied into.
//
// Lifetime: every view holds what its memory needs. release="on_free": the Batch's
// KeepAlive (its slot and, through it, the consumer's mapping). release="next": the
// Consumer itself (the mapping; the slot is given back at the next call). So close(),
// `del consumer` or a `with` block ending only stop delivery: no view is ever left
// pointing at unmapped memory, and closing never raises because views live.
#include <pybind11/stl.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "batchcast/consumer.h"
#include "bindings/python/src/bindings.h"
#include "bindings/python/src/consumer_fetch.h"
#include "core/log.h"
#include "core/option_scope.h"
#include "node/consumer_internal.h"
#include "telemetry/rank_data.h"

namespace batchcast::python {
namespace {

class PyConsumer {
 public:
  PyConsumer(const std::string& address, py::dict kwargs, int rank, const std::string& name,
             bool release_on_next)
      : release_on_next_(release_on_next), pid_(getpid()), address_(address) {
    Options o = OptionsFromKwargs(kwargs);
    // The kwargs are this consumer's alone: a leader option given here would be ignored.
    ThrowIfError(CheckFrontDoorOptions(o, FrontDoor::kConsumer));
    // Telemetry first: an output path that cannot be written is refused before attaching.
    std::shared_ptr<ProcessTelemetry> telemetry = ValueOrThrow(ProcessTelemetry::Start(
        o, telemetry::ProcessKind::kConsumer, rank, -1, telemetry::Role::kConsumer, ""));
    // release="on_free": a `for images, labels in loader` loop still holds the previous
    // batch while it fetches the next; the leader reserves that one too and checks
    // buffer_depth as given (kLoopHoldsBatch; docs/python.md, "Holding batches").
    std::unique_ptr<Consumer> c;
    Status st = AttachInterruptibly(address, o, rank, name, !release_on_next, &c);
    if (!st.ok()) throw StatusError(st.WithContext("consumer: attach to '" + address + "'"));
    batches_per_epoch_ = c->BatchesPerEpoch();
    if (telemetry != nullptr) internal::ConsumerAccess::SetCollector(*c, telemetry->collector());
    state_ = std::make_shared<FetchState>();
    state_->telemetry = telemetry_ = std::move(telemetry);
    state_->consumer = std::move(c);
    thread_ = std::thread(FetchLoop, state_);
  }
  ~PyConsumer() { Close(/*raise=*/false); }

  // (images, labels, ids or None, info) as DLPack capsules (or read-only numpy views), or
  // None at the end of this consumer's stream. copy=true: writable numpy arrays owning a
  // private copy of the batch, whose slot is given back before this returns.
  py::object Next(bool want_ids, bool numpy, bool copy) {
    if (getpid() != pid_) throw StatusError(ForkedError());
    if (!state_)
      throw StatusError(ConsumerClosedError(address_, "a batch asked for after close()",
                                            "create a new Consumer"));
    auto s = state_;
    bool in_flight;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      in_flight = s->requested;
    }
    if (!in_flight) {
      // Release before asking: releasing never waits for the fetch thread then.
      WithoutGil([&] { current_.Release(); });
      std::lock_guard<std::mutex> lock(s->mu);
      s->requested = true;
      s->cv.notify_all();
    }
    WaitInterruptibly([&](int64_t chunk_ms) {
      std::unique_lock<std::mutex> lock(s->mu);
      return s->cv.wait_for(lock, std::chrono::milliseconds(chunk_ms), [&] { return s->ready; });
    });
    Batch b;
    Status st;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      b = std::move(s->batch);
      st = s->status;
      s->ready = s->requested = false;
    }
    if (in_flight)  // an interrupted request: the previous batch is only dropped now
      WithoutGil([&] { current_.Release(); });
    if (st.code() == StatusCode::kEndOfStream) return py::none();
    ThrowIfError(st);
    if (copy) return WrapCopy(std::move(b), want_ids);
    return Wrap(std::move(b), want_ids, numpy);
  }

  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // Whether the consumer has handed out its last batch (ConsumerAccess::Finished).
  bool Finished() const {
    return !state_ || !state_->consumer || internal::ConsumerAccess::Finished(*state_->consumer);
  }

  // (epoch, batch, run_epoch) of the batch the next call returns (Consumer::Position()).
  std::tuple<uint64_t, uint64_t, int64_t> Position() const {
    if (!state_ || !state_->consumer)
      throw StatusError(ConsumerClosedError(address_, "state_dict() after close()",
                                            "save its state_dict() before close()"));
    StreamPosition p = state_->consumer->Position();
    return {p.epoch, p.batch, p.run_epoch};
  }

  // load_state_dict(): moves a consumer that has not asked for a batch yet.
  void StartAt(uint64_t epoch, uint64_t batch, int64_t run_epoch) {
    if (!state_ || !state_->consumer)
      throw StatusError(ConsumerClosedError(address_, "load_state_dict() after close()",
                                            "create a new Consumer with the state "
                                            "(Consumer(..., **state))"));
    ThrowIfError(internal::ConsumerAccess::StartAt(*state_->consumer, {epoch, batch, run_epoch}));
  }

  static Status ForkedError() {
    return Status(StatusCode::kFailedPrecondition,
                  "consumer: used in a forked child process (pid " + std::to_string(getpid()) +
                      ", e.g. a DataLoader worker with num_workers > 0); a Consumer belongs "
                      "to the process that created it and the leader decodes already: iterate "
                      "it in the training process (DataLoader(..., num_workers=0); "
                      "batchcast.torch.StreamDataset wraps it as a Dataset)");
  }

  // The summary the consumer's telemetry printed at close() ("" before, or when off).
  std::string TelemetrySummary() const { return telemetry_ ? telemetry_->summary() : ""; }
  // A point of the named series `name` in this consumer's telemetry (a no-op when off).
  // With telemetry off the point goes nowhere, but the name is checked all the same: a
  // script must not start failing only when telemetry is turned on.
  void Record(const std::string& name, double value) {
    if (telemetry_ && telemetry_->collector() != nullptr)
      ThrowIfError(telemetry_->collector()->Record(name, value));
    else
      ThrowIfError(telemetry::ValidateSeriesName(name));
  }

  py::dict Stats() const {
    py::dict d;
    if (!state_ || !state_->consumer) return d;
    ConsumerStats s = state_->consumer->stats();
    d["batches"] = s.batches;
    d["samples"] = s.samples;
    d["repeats"] = s.repeats;
    d["wait_ns"] = s.wait_ns;
    d["epochs_completed"] = s.epochs_completed;
    d["repeats_per_epoch"] = s.repeats_per_epoch;
    return d;
  }

  // Leaves the stream. Never blocks on a request still in flight (e.g. interrupted):
  // the fetch thread finishes it and detaches on its own. With telemetry on, the files are
  // written here: one that cannot be written raises (raise=false, from the destructor: logged).
  void Close(bool raise = true) {
    if (!state_) return;
    if (getpid() != pid_) {
      // A forked copy (e.g. a DataLoader worker): the fetch thread and the membership are the
      // parent's. Detaching here would leave the stream in the parent's name and joining
      // would wait for a thread that does not exist in this process, so both are left alone.
      AbandonInForkedChild(thread_);     // never joined here
      AbandonInForkedChild(state_);      // never detached here
      AbandonInForkedChild(current_);    // the parent's slot
      AbandonInForkedChild(telemetry_);  // its sampler thread
      return;
    }
    bool busy;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(state_->mu);
      busy = state_->requested && !state_->ready;
      // While a Next() runs, releasing here would wait for it: the thread drops it after.
      if (busy) state_->leftover = std::move(current_);
      state_->stop = true;
      state_->cv.notify_all();
    }
    if (!busy) {
      py::gil_scoped_release nogil;
      current_.Release();
    }
    if (busy) {
      thread_.detach();
    } else {
      py::gil_scoped_release nogil;
      thread_.join();
    }
    state_.reset();
    Status written;
    if (telemetry_) {
      py::gil_scoped_release nogil;
      written = telemetry_->Finish();  // (the fetch thread may have written them already)
    }
    if (!written.ok()) {
      if (raise) throw StatusError(written.WithContext("consumer close(): telemetry"));
      BC_LOG(Error, Telem, "consumer telemetry: {}", written.ToString());
    }
  }

 private:
  py::object Wrap(Batch b, bool want_ids, bool numpy) {
    // release="next" views pin no slot, but they keep the mapping (the Consumer) alive.
    std::shared_ptr<void> keep =
        release_on_next_ ? std::shared_ptr<void>(state_->consumer) : b.KeepAlive();
    // The telemetry first: a pair destroys `second` (the slot, whose release records a step
    // into the collector) before `first`.
    if (state_->telemetry)
      keep = std::make_shared<std::pair<std::shared_ptr<ProcessTelemetry>, std::shared_ptr<void>>>(
          state_->telemetry, std::move(keep));
    auto make = [&](const TensorView& v) -> py::object {
      if (numpy) return MakeNumpyView(v, keep);
      return MakeDLPackCapsule(v, keep);
    };
    py::object images = b.images().nbytes > 0 || b.num_tensors() == 0 ? make(b.images())
                                                                       : py::none();
    py::object labels = make(b.labels());
    py::object ids = want_ids ? make(IdsView(b.sample_ids(), b.size())) : py::none();
    py::object info = py::cast(b.info());
    py::object named = NamedTensors(b, [&](const TensorView& v, std::shared_ptr<void> own) {
      if (!own) return make(v);
      return numpy ? py::object(MakeNumpyView(v, std::move(own)))
                   : py::object(MakeDLPackCapsule(v, std::move(own)));
    });
    if (release_on_next_) current_ = std::move(b);
    // Otherwise `b` goes out of scope here; the capsules' `keep` holds the slot.
    return py::make_tuple(images, labels, ids, info, named);
  }

  // writable=True: the batch copied into new arrays (one memcpy, GIL released), then its
  // slot given back at once, so private batches never count against buffer_depth.
  py::object WrapCopy(Batch b, bool want_ids) {
    TensorView ids = want_ids ? IdsView(b.sample_ids(), b.size()) : TensorView();
    py::array images = MakeNumpyArray(b.images());
    py::array labels = MakeNumpyArray(b.labels());
    py::array id_array = want_ids ? MakeNumpyArray(ids) : py::array();
    void* images_to = images.mutable_data();
    void* labels_to = labels.mutable_data();
    void* ids_to = want_ids ? id_array.mutable_data() : nullptr;
    py::object info = py::cast(b.info());
    std::vector<std::pair<void*, TensorView>> copies;
    py::object named = NamedTensorCopies(b, &copies);
    const bool has_images = b.images().nbytes > 0 || b.num_tensors() == 0;
    WithoutGil([&] {
      if (b.images().nbytes > 0) std::memcpy(images_to, b.images().data, b.images().nbytes);
      std::memcpy(labels_to, b.labels().data, b.labels().nbytes);
      if (want_ids) std::memcpy(ids_to, ids.data, ids.nbytes);
      for (const auto& [to, view] : copies) std::memcpy(to, view.data, view.nbytes);
      b.Release();
    });
    return py::make_tuple(has_images ? py::object(images) : py::none(), labels,
                          want_ids ? py::object(id_array) : py::none(), info, named);
  }

  bool release_on_next_;
  pid_t pid_;
  std::string address_;
  int64_t batches_per_epoch_ = 0;
  std::shared_ptr<FetchState> state_;
  std::shared_ptr<ProcessTelemetry> telemetry_;  // null when telemetry is off
  std::thread thread_;
  Batch current_;  // release="next": the batch handed out last
};

}  // namespace

void BindConsumer(py::module_& m) {
  py::class_<BatchInfo>(m, "BatchInfo")
      .def_readonly("epoch", &BatchInfo::epoch)
      .def_readonly("index", &BatchInfo::index)
      .def_readonly("producer_seq", &BatchInfo::producer_seq)
      .def_readonly("producer_batch", &BatchInfo::producer_batch)
      .def_readonly("size", &BatchInfo::size)
      .def_readonly("repeats", &BatchInfo::repeats)
      .def_readonly("lr_factor", &BatchInfo::lr_factor)
      .def_readonly("image_size", &BatchInfo::image_size)
      .def_readonly("last_in_epoch", &BatchInfo::last_in_epoch)
      .def_readonly("channels_last", &BatchInfo::channels_last)
      .def_readonly("wait_ns", &BatchInfo::wait_ns)
      .def_readonly("handoff_ns", &BatchInfo::handoff_ns);
  py::class_<PyConsumer>(m, "_Consumer")
      .def(py::init<const std::string&, py::dict, int, const std::string&, bool>(),
           py::arg("address"), py::arg("options"), py::arg("rank") = -1,
           py::arg("name") = "", py::arg("release_on_next") = false)
      .def("next", &PyConsumer::Next, py::arg("want_ids") = false, py::arg("numpy") = false,
           py::arg("copy") = false)
      .def("batches_per_epoch", &PyConsumer::batches_per_epoch)
      .def("finished", &PyConsumer::Finished)
      .def("position", &PyConsumer::Position)
      .def("start_at", &PyConsumer::StartAt, py::arg("epoch"), py::arg("batch"),
           py::arg("run_epoch") = -1)
      .def("stats", &PyConsumer::Stats)
      .def("telemetry_summary", &PyConsumer::TelemetrySummary)
      .def("record", &PyConsumer::Record, py::arg("name"), py::arg("value"))
      .def("close", [](PyConsumer& c) { c.Close(); });
}

}  // namespace batchcast::python
