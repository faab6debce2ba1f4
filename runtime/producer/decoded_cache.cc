// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/decoded_cache.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "core/option_scope.h"

namespace batchcast::producer {

struct DecodedCache::Entry {
  pipeline::DecodedSample sample;  // sample.pixels points into `pixels`, rows packed
  std::unique_ptr<uint8_t[]> pixels;
  std::atomic<Entry*> next{nullptr};  // the same key at another scale
};

namespace {

// "12.3 MB", or "45.6 kB" under a megabyte (MNIST-sized samples).
std::string Megabytes(double bytes) {
  return bytes < 1e6 ? fmt::format("{:.1f} kB", bytes / 1e3) : fmt::format("{:.1f} MB", bytes / 1e6);
}

}  // namespace

DecodedCache::DecodedCache(int64_t budget, int64_t num_keys, std::string what)
    : budget_(budget),
      num_keys_(num_keys),
      what_(std::move(what)),
      slots_(new std::atomic<Entry*>[static_cast<size_t>(std::max<int64_t>(num_keys, 1))]) {
  for (int64_t k = 0; k < num_keys_; ++k) slots_[k].store(nullptr, std::memory_order_relaxed);
}

DecodedCache::~DecodedCache() {
  const int64_t lookups = lookups_.load(), hits = hits_.load();
  if (lookups > 0)
    BC_LOG(Info, Pipe, "cache: {} samples of {} kept ({} of the budget {}; {} declined when it "
           "was full), {} hits in {} lookups ({:.1f}%)", entries(), what_, Megabytes(bytes()),
           Megabytes(budget_), declined(), hits, lookups, 100.0 * hits / lookups);
  for (int64_t k = 0; k < num_keys_; ++k) {
    for (Entry* e = slots_[k].load(std::memory_order_relaxed); e != nullptr;) {
      Entry* next = e->next.load(std::memory_order_relaxed);
      delete e;
      e = next;
    }
  }
}

int64_t DecodedCache::EntryBytes(size_t pixel_bytes) {
  return static_cast<int64_t>(pixel_bytes + sizeof(Entry));
}

bool DecodedCache::Find(int64_t key, int scale_num, pipeline::DecodedSample* out) const {
  if (key < 0 || key >= num_keys_) return false;
  lookups_.fetch_add(1, std::memory_order_relaxed);
  for (const Entry* e = slots_[key].load(std::memory_order_acquire); e != nullptr;
       e = e->next.load(std::memory_order_acquire)) {
    if (scale_num != 0 && e->sample.scale_num != scale_num) continue;
    hits_.fetch_add(1, std::memory_order_relaxed);
    *out = e->sample;
    return true;
  }
  return false;
}

void DecodedCache::Offer(int64_t key, const pipeline::DecodedSample& sample) {
  if (key < 0 || key >= num_keys_) return;
  // The link to append to: the key's slot, or the `next` of its last entry. A key holds each
  // scale once.
  std::atomic<Entry*>* link = &slots_[key];
  for (Entry* e = link->load(std::memory_order_acquire); e != nullptr;
       e = link->load(std::memory_order_acquire)) {
    if (e->sample.scale_num == sample.scale_num) return;
    link = &e->next;
  }
  const size_t pixel_bytes = sample.bytes();
  const int64_t need = EntryBytes(pixel_bytes);
  int64_t held = bytes_.load(std::memory_order_relaxed);
  do {
    if (held + need > budget_) {  // full: admit nothing more, evict nothing
      declined_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  } while (!bytes_.compare_exchange_weak(held, held + need, std::memory_order_relaxed));
  auto entry = std::make_unique<Entry>();
  entry->pixels.reset(new uint8_t[std::max<size_t>(pixel_bytes, 1)]);
  const size_t row = size_t(sample.width) * sample.channels;
  for (int y = 0; y < sample.height; ++y)
    std::memcpy(entry->pixels.get() + size_t(y) * row, sample.pixels + size_t(y) * sample.stride,
                row);
  entry->sample = sample;
  entry->sample.pixels = entry->pixels.get();
  entry->sample.stride = row;
  // Append at the end of the chain; another worker may append first (the same scale: keep
  // theirs; another scale: append after it).
  for (;;) {
    Entry* expected = nullptr;
    if (link->compare_exchange_strong(expected, entry.get(), std::memory_order_release,
                                      std::memory_order_acquire)) {
      entry.release();
      entries_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (expected->sample.scale_num == sample.scale_num) break;
    link = &expected->next;
  }
  bytes_.fetch_sub(need, std::memory_order_relaxed);  // another worker kept it first
}

Status CheckCacheBudget(const Options& options, pipeline::Pipeline& pipeline,
                        const DecodedCache& cache) {
  const data::DatasetInfo& info = pipeline.dataset();
  const int64_t n = info.num_samples;
  const int64_t probes = std::min<int64_t>(n, 16);
  double sum = 0;
  int64_t measured = 0;
  for (int64_t i = 0; i < probes; ++i) {
    auto bytes = pipeline.DecodedBytes(i * n / probes);
    if (!bytes.ok()) continue;  // a bad sample: the pipeline reports it when it is used
    sum += double(DecodedCache::EntryBytes(*bytes));
    ++measured;
  }
  if (measured == 0) return Status::Ok();
  const double mean = sum / double(measured);
  const int producer_batch =
      options.producer_batch > 0 ? options.producer_batch : 2 * options.batch_size;
  const double batch_bytes = mean * producer_batch, all = mean * double(n);
  const double held = std::min(1.0, double(cache.budget()) / all);
  if (double(cache.budget()) < batch_bytes)
    return InvalidArgumentError(
        "cache={} bytes holds less than one producer batch of decoded samples of {} ({} samples "
        "x about {} = {}): it would save almost nothing; set cache=0 (off), or cache={} to keep "
        "the whole dataset (about {})",
        cache.budget(), info.path, producer_batch, Megabytes(mean), Megabytes(batch_bytes),
        SizeOptionValue(all), Megabytes(all));
  if (held < 0.25)
    BC_LOG(Warn, Pipe, "cache={} holds about {:.0f}% of the decoded samples of {} (about {} in "
           "all): later epochs still decode the other {:.0f}%; set cache={} to keep them all",
           Megabytes(double(cache.budget())), 100 * held, info.path, Megabytes(all),
           100 * (1 - held), SizeOptionValue(all));
  else
    BC_LOG(Info, Pipe, "cache: {} for about {} of decoded samples of {} ({:.0f}% kept; admit "
           "until full, no eviction)", Megabytes(double(cache.budget())), Megabytes(all),
           info.path, 100 * held);
  return Status::Ok();
}

}  // namespace batchcast::producer
