// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "bindings/python/src/consumer_fetch.h"

#include <thread>

#include "core/log.h"
#include "node/consumer_internal.h"

namespace batchcast::python {

void FetchLoop(std::shared_ptr<FetchState> s) {
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [&] { return s->stop || (s->requested && !s->ready); });
    if (s->requested && !s->ready) {
      lock.unlock();
      Batch b;
      Status st = s->consumer->Next(&b);
      lock.lock();
      s->batch = std::move(b);
      s->status = st;
      s->ready = true;
      s->cv.notify_all();
      continue;
    }
    if (s->stop) break;
  }
  // Drop whatever was fetched and nobody collected, then leave the stream.
  Batch drop = std::move(s->batch);
  Batch drop_leftover = std::move(s->leftover);
  lock.unlock();
  drop.Release();
  drop_leftover.Release();
  if (s->consumer) s->consumer->Detach().IgnoreError();
  s->consumer.reset();
  if (s->telemetry) {
    Status st = s->telemetry->Finish();
    if (!st.ok()) BC_LOG(Error, Telem, "consumer telemetry: {}", st.ToString());
  }
}

Status AttachInterruptibly(const std::string& address, const Options& o, int rank,
                           const std::string& name, bool loop_holds_batch,
                           std::unique_ptr<Consumer>* out) {
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    std::unique_ptr<Consumer> consumer;
  };
  auto p = std::make_shared<Pending>();
  std::thread([p, address, o, rank, name, loop_holds_batch] {
    auto r = internal::ConsumerAccess::Attach(address, o, rank, name, loop_holds_batch);
    std::lock_guard<std::mutex> lock(p->mu);
    if (r.ok()) p->consumer = std::move(r).value();
    else p->status = r.status();
    p->done = true;
    p->cv.notify_all();
  }).detach();
  WaitInterruptibly([&](int64_t chunk_ms) {
    std::unique_lock<std::mutex> lock(p->mu);
    return p->cv.wait_for(lock, std::chrono::milliseconds(chunk_ms), [&] { return p->done; });
  });
  std::lock_guard<std::mutex> lock(p->mu);
  *out = std::move(p->consumer);
  return p->status;
}

Status ConsumerClosedError(const std::string& address, const std::string& what,
                           const std::string& todo) {
  return Status(StatusCode::kFailedPrecondition,
                "batchcast.Consumer of '" + address + "': " + what +
                    ": it was closed (close(), del or the end of its `with` block) and has "
                    "left the stream; " + todo);
}

}  // namespace batchcast::python
