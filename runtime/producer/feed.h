// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Where a producer's batches come from: the first of the two small policies a front door
// gives producer::Producer (the second, who receives which positions, is distribution.h).
//
//   PipelineFeed  the native decode pipeline (a BatchSource) over the stream definition
//                 (StreamPlan: a pure function of (seed, epoch, position)) or a
//                 progressive-resizing schedule: any position of any epoch can be made
//                 again, so late joiners and resuming consumers get replays decoded anew;
//   ExternalFeed  batches the caller makes (a Python iterable), written into the slot by a
//                 BatchMaker, one after another: an epoch ends when the maker says so; the
//                 first positions of an epoch are kept (copies) for late joiners' replays,
//                 and a resumed stream skips to its position by reading past the batches;
//   ExchangeFeed  the multi-node exchange (exchange_feed.h): each node decodes its share of
//                 a producer batch and receives the others' from the other node leaders.
//
// The Producer asks a feed to size the slots (Plan), to begin each epoch, and to produce a
// position (or some of its samples) for a set of receivers through the one SlotWriter.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "producer/batch_source.h"
#include "producer/slot_layout.h"
#include "producer/slot_writer.h"

namespace batchcast::schedule {
class ResizeSchedule;
}
namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::producer {

// What a feed tells the Producer at creation, to size the slots and the ring.
struct FeedPlan {
  int64_t num_samples = 0;           // samples per epoch (0: unknown, an external iterable)
  int64_t producer_batch = 0;        // samples of a full producer batch
  uint32_t max_consumer_batch = 0;   // the largest consumer batch the slots hold
  pipeline::SampleLayout sample;     // the largest image layout of a batch
  std::vector<SlotBucket> buckets;   // progressive resizing: one per image size
  std::vector<pipeline::SampleLayout> stage_sizes;  // image sizes a model stage probes
  std::vector<TensorSpec> tensors;   // further named tensors (an external feed's)
  std::string resize_spec;           // shown to consumers ("" = none)
  bool stages = true;                // it runs option 'stage' (a native pipeline)
};

// A feed's own figures (the multi-node exchange's).
struct FeedStats {
  int64_t exchange_bytes = 0;         // received from other node leaders
  int64_t exchange_ns = 0;            // wall time with at least one exchange in flight
  int64_t exchange_wait_ns = 0;       // time blocked waiting for exchanges
  int exchange_depth = 0;             // the agreed number of batches in flight
  std::vector<int64_t> epoch_end_ns;  // monotonic time the last batch of each epoch was out
};

// Position k of epoch e, of bpe positions (-1: unknown until the feed says which is last).
struct Position {
  uint64_t epoch = 0;
  int64_t k = 0;
  int64_t bpe = 0;
  uint32_t part_repeats = 0;  // with a part: its last samples repeat others' (a shard tail)
};

// How a feed can make a position again (late joiners, resuming consumers).
enum class Replay {
  kAny,           // any position of any epoch (a pure function of the stream definition):
                  // late joiners and resuming consumers
  kCurrentEpoch,  // any position of the current epoch (a resize schedule): late joiners
  kEpochStart,    // the current epoch's first positions, kept as copies (Retain): late joiners
  kNone,          // nothing: joiners start at the next epoch
};

class Feed {
 public:
  virtual ~Feed() = default;
  virtual const char* name() const = 0;  // "native pipeline", "external iterable", ...
  // Fills *plan from the resolved options and the front door's largest consumer batch
  // (0: options.batch_size); an error names `who`.
  virtual Status Plan(const Options& options, uint32_t max_consumer_batch, std::string_view who,
                      FeedPlan* plan) = 0;
  // Called once the ring and writer exist, before the stream.
  virtual void Attach(SlotWriter* writer, telemetry::Collector* collector) {
    writer_ = writer;
    collector_ = collector;
  }
  // The epoch's positions, or -1 when the feed says which is last (EpochEnded).
  virtual Result<int64_t> BeginEpoch(uint64_t epoch) = 0;
  // The dataset indices of position `p` (empty where the feed does not know them ahead).
  virtual std::span<const int64_t> Samples(const Position& p) { return {}; }
  // Produces position p for the consumers in `only`: all its samples, or `part` (a subset
  // of Samples(p), e.g. one trainer's shard). Returns the receivers, or nullopt when the
  // slot wait gave up (`wait`). next_k >= 0: the position that most likely comes next (to
  // fill ahead).
  virtual Result<std::optional<uint64_t>> Produce(const Position& p, std::span<const int64_t> part,
                                                  uint64_t only, const AcquireWait& wait,
                                                  int64_t next_k) = 0;
  // Position p is published to nobody (only joiners waiting for a later epoch): no decode.
  // A feed that reads its batches in order reads past this one.
  virtual Status Skip(const Position& p) { return writer_->PublishEmpty(p.epoch, p.k); }
  // A resumed stream starts at position p.k of its epoch: a feed that reads its batches in
  // order reads past those before it (unpublished).
  virtual Status Seek(const Position& p) { return Status::Ok(); }
  // With bpe -1: the positions the epoch is expected to have (< 0: unknown), for the
  // late-join window.
  virtual int64_t DeclaredPositions() const { return -1; }
  // With bpe -1: whether the last position produced ended the epoch.
  virtual bool EpochEnded() const { return false; }
  virtual Replay replay() const = 0;
  // With Replay::kEpochStart: keep copies of the epoch's first `positions` positions.
  virtual void Retain(int64_t positions) {}
  // At the end of an epoch: its skip count, or the error for an epoch without a good sample.
  virtual Status EndEpoch(uint64_t epoch) { return writer_->EndEpoch(epoch); }
  // After the stream (or on a failure): finishes work in flight. Idempotent.
  virtual Status Drain() { return Status::Ok(); }
  // Whether the feed already printed the report of its failure (the multi-node leaders
  // print theirs together, docs/multinode.md): the front door must not print it again.
  virtual bool reported() const { return false; }
  virtual FeedStats stats() const { return {}; }
  virtual int threads() const { return 0; }
  // The progressive-resizing schedule being executed (null: none).
  virtual const schedule::ResizeSchedule* resize_schedule() const { return nullptr; }
  // The source that makes consumers' views (docs/pipeline.md "Views through the Producer"),
  // or null with *why: the cause a consumer's view is refused.
  virtual BatchSource* ViewSource(std::string* why) {
    *why = std::string("the ") + name() + " makes one kind of image";
    return nullptr;
  }

 protected:
  SlotWriter* writer_ = nullptr;
  telemetry::Collector* collector_ = nullptr;
};

// The native pipeline over the stream plan, or over options.resize's schedule (its plan is
// printed to stdout when `print_plan`, always logged and annotated in telemetry).
std::unique_ptr<Feed> MakePipelineFeed(std::unique_ptr<BatchSource> source, bool print_plan);

// An external feed's batch maker (the Python Producer's iterator).
struct ExternalSlot {
  uint8_t* images = nullptr;        // capacity x layout.bytes()
  int64_t* labels = nullptr;        // capacity entries
  int64_t* ids = nullptr;           // capacity entries
  int64_t capacity = 0;
  // Each named tensor's capacity x sample bytes; a variable-length one's values (room for
  // its spec's values_bytes), whose row offsets go to offsets[t] (n + 1 of them, from 0).
  std::vector<uint8_t*> tensors;
  std::vector<int64_t*> offsets;    // null for a fixed-shape tensor
  uint64_t epoch = 0;               // the position written (for messages)
  int64_t batch = 0;
};
struct ExternalBatch {
  int64_t num_samples = 0;          // samples written at the front of the slot
  bool ids_written = false;         // false: ids are the running index within the epoch
  bool last_in_epoch = false;       // the epoch's last batch
  float lr_factor = 1.0f;
};
// It holds the batches it has read, in order (the feed reads at most two ahead).
class BatchMaker {
 public:
  virtual ~BatchMaker() = default;
  // A new pass over the batches: epoch `epoch` starts (batches still held are dropped).
  virtual Status BeginEpoch(uint64_t epoch) = 0;
  // Reads the pass's next batch and holds it; *got false: the pass has no more.
  virtual Status Fetch(bool* got) = 0;
  // Writes the oldest batch held into `slot` and lets it go.
  virtual Status Next(const ExternalSlot& slot, ExternalBatch* batch) = 0;
  // Lets the oldest batch held go unwritten (a position nobody receives, a resumed stream);
  // returns its number of samples.
  virtual int64_t Drop() = 0;
};

struct ExternalFeedConfig {
  pipeline::SampleLayout layout;        // every image (0 bytes: no images; then tensors)
  std::vector<TensorSpec> tensors;      // further named tensors of every sample
  int64_t producer_batch = 0;           // most samples one batch holds
  int64_t epoch_samples = 0;            // samples per epoch (0: unknown)
  uint32_t max_consumer_batch = 0;      // largest consumer batch (<= producer_batch)
};
std::unique_ptr<Feed> MakeExternalFeed(const ExternalFeedConfig& config,
                                       std::unique_ptr<BatchMaker> maker);

}  // namespace batchcast::producer
