// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The Python consumer's helper threads (consumer_fetch.cc): a blocking Consumer::Attach and
// Consumer::Next run there, so the Python thread waits in bounded chunks with the GIL
// released and still sees KeyboardInterrupt; an interrupted request is not lost.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "batchcast/batch.h"
#include "batchcast/consumer.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "bindings/python/src/bindings.h"

namespace batchcast::python {

// What the Python object and the fetch thread share. The thread owns a reference, so
// an object dropped while a request is in flight is cleaned up when the request ends.
struct FetchState {
  std::shared_ptr<Consumer> consumer;  // also held by release="next" views (the mapping)
  // Telemetry (null when off): finished after the consumer detached; batches still alive
  // hold it too, since their release records a step time into its collector.
  std::shared_ptr<ProcessTelemetry> telemetry;
  std::mutex mu;
  std::condition_variable cv;
  bool requested = false;   // a Next() is asked for or running
  bool ready = false;       // its result is in `batch` / `status`
  bool stop = false;
  Batch batch;
  Status status;
  Batch leftover;           // a batch the Python side dropped while a request was in flight
};

// The fetch thread: runs each requested Next(); when stopped, drops what nobody collected,
// detaches the consumer and finishes its telemetry.
void FetchLoop(std::shared_ptr<FetchState> s);

// Consumer::Attach (which may wait connect_timeout for the leader to listen) on a helper
// thread, so that Ctrl-C interrupts the wait; an interrupted attach finishes on its own and
// the consumer it made leaves the stream at once.
// loop_holds_batch: the Python `for` loop holds one batch while it fetches the next; the
// leader reserves a slot for it beyond buffer_depth (kLoopHoldsBatch).
Status AttachInterruptibly(const std::string& address, const Options& o, int rank,
                           const std::string& name, bool loop_holds_batch,
                           std::unique_ptr<Consumer>* out);

// A use of a closed batchcast.Consumer of `address`: names it, what was tried (`what`) and
// what to do (`todo`).
Status ConsumerClosedError(const std::string& address, const std::string& what,
                           const std::string& todo);

}  // namespace batchcast::python
