// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Carving producer batches into one consumer's batches (transport/shm/carving.h is the
// arithmetic; this file applies it to the slots a consumer acquires).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/readonly_guard.h"
#include "node/consumer_core.h"
#include "transport/shm/control.h"

namespace batchcast::internal {
namespace {

// The image view of `size` samples of geometry `d` whose first image is at `first`.
TensorView ImageView(const shm::SlotDesc& d, const uint8_t* first, uint32_t size) {
  TensorView img;
  img.data = const_cast<uint8_t*>(first);
  img.dtype = static_cast<DType>(d.dtype);
  img.ndim = 4;
  img.shape[0] = size;
  if (d.layout == 1) {
    img.shape[1] = d.height, img.shape[2] = d.width, img.shape[3] = d.channels;
  } else {
    img.shape[1] = d.channels, img.shape[2] = d.height, img.shape[3] = d.width;
  }
  img.nbytes = size * d.sample_bytes;
  return img;
}

// The view of named tensor `t` of geometry `d` for `size` samples from `first`.
TensorView NamedView(const shm::TensorDesc& t, const uint8_t* first, uint32_t size) {
  TensorView v;
  v.data = const_cast<uint8_t*>(first);
  v.dtype = static_cast<DType>(t.dtype);
  v.ndim = 1 + static_cast<int>(std::min(t.ndim, shm::kTensorMaxDims));
  v.shape[0] = size;
  for (int k = 1; k < v.ndim; ++k) v.shape[k] = t.shape[k - 1];
  v.nbytes = size * t.sample_bytes;
  return v;
}

// Rows of a variable-length tensor with no sample (a view of 0 bytes still points somewhere).
alignas(64) const uint8_t kNoRows[64] = {};

// The values view of variable-length tensor `t`: `rows` rows from `first`.
// [rows, per-row shape...]: the variable first dimension becomes the rows of every sample.
TensorView ValuesView(const shm::TensorDesc& t, const uint8_t* first, uint64_t rows) {
  TensorView v;
  v.data = const_cast<uint8_t*>(rows > 0 ? first : kNoRows);
  v.dtype = static_cast<DType>(t.dtype);
  v.ndim = static_cast<int>(std::clamp(t.ndim, 1u, shm::kTensorMaxDims));
  v.shape[0] = static_cast<int64_t>(rows);
  for (int k = 1; k < v.ndim; ++k) v.shape[k] = t.shape[k];
  v.nbytes = rows * t.sample_bytes;
  return v;
}

TensorView OffsetsView(const int64_t* offsets, uint32_t size) {
  TensorView v;
  v.data = const_cast<int64_t*>(offsets);
  v.dtype = DType::kInt64;
  v.ndim = 1;
  v.shape[0] = int64_t(size) + 1;
  v.nbytes = (size_t(size) + 1) * sizeof(int64_t);
  return v;
}

// Variable-length tensor t of a piece of `size` samples at slot position `start` of producer
// batch `d` (slot memory `data`): samples within [0, n) are one run of rows, viewed in place
// (offsets rebased to 0 into the batch's own copy); a piece into the fill-repeat tail copies
// its rows (position n + j is sample j mod n).
void ViewRaggedInPlace(const shm::SlotDesc& d, const uint8_t* data, uint32_t t, uint32_t start,
                       uint32_t size, RaggedCopies* copies, PieceViews* v) {
  const shm::TensorDesc& td = d.tensors[t];
  std::vector<int64_t>& off = copies->offsets[t];
  off.assign(size_t(size) + 1, 0);
  if (uint64_t(start) + size <= d.num_samples) {
    const auto* slot_off = reinterpret_cast<const int64_t*>(data + td.offset) + start;
    for (uint32_t i = 0; i <= size; ++i) off[i] = slot_off[i] - slot_off[0];
    const uint8_t* first = data + td.values_offset + uint64_t(slot_off[0]) * td.sample_bytes;
    v->tensors[t] = ValuesView(td, first, uint64_t(off[size]));
  } else {
    std::vector<uint8_t>& rows = copies->values[t];
    for (uint32_t i = 0; i < size; ++i) {
      const Rows r = RowsAt(d, data, td, uint64_t(start) + i);
      rows.insert(rows.end(), r.first, r.first + r.count * td.sample_bytes);
      off[i + 1] = off[i] + int64_t(r.count);
    }
    v->tensors[t] = ValuesView(td, rows.data(), uint64_t(off[size]));
  }
  v->offsets[t] = OffsetsView(off.data(), size);
}

}  // namespace

OwnedSamples::~OwnedSamples() {
  if (sealed_base_ == nullptr) return;
  if (guarded_) UnregisterReadOnlyRegion(sealed_base_);
  munmap(sealed_base_, sealed_bytes_);
}

Status OwnedSamples::Seal(const std::string& what) {
  if (sealed() || count == 0) return Status::Ok();
  // One mapping: images, labels, ids, then each named tensor, every part 64-byte aligned.
  auto up = [](uint64_t v, uint64_t a) { return (v + a - 1) / a * a; };
  const uint64_t labels_at = up(images.size(), 64);
  const uint64_t ids_at = up(labels_at + labels.size() * sizeof(int64_t), 64);
  uint64_t end = ids_at + ids.size() * sizeof(int64_t);
  uint64_t tensor_at[shm::kMaxTensors] = {};
  for (size_t t = 0; t < tensors.size(); ++t) {
    tensor_at[t] = up(end, 64);
    end = tensor_at[t] + tensors[t].size();
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = static_cast<size_t>(up(end, page));
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return ErrnoError(errno, "consumer: mapping {} bytes for a joined batch of {} samples",
                      bytes, count);
  auto* base = static_cast<uint8_t*>(m);
  auto put = [&](uint64_t at, const void* from, size_t n) {
    if (n > 0) std::memcpy(base + at, from, n);
  };
  put(0, images.data(), images.size());
  put(labels_at, labels.data(), labels.size() * sizeof(int64_t));
  put(ids_at, ids.data(), ids.size() * sizeof(int64_t));
  for (size_t t = 0; t < tensors.size(); ++t) put(tensor_at[t], tensors[t].data(), tensors[t].size());
  if (mprotect(m, bytes, PROT_READ) != 0) {
    const int e = errno;
    munmap(m, bytes);
    return ErrnoError(e, "consumer: making a joined batch of {} samples read-only", count);
  }
  sealed_base_ = m;
  sealed_bytes_ = bytes;
  sealed_images_ = base;
  sealed_labels_ = reinterpret_cast<const int64_t*>(base + labels_at);
  sealed_ids_ = reinterpret_cast<const int64_t*>(base + ids_at);
  for (size_t t = 0; t < tensors.size(); ++t) sealed_tensors_[t] = base + tensor_at[t];
  Status guard = RegisterReadOnlyRegion(m, bytes, what);
  guarded_ = guard.ok();
  if (!guarded_)
    BC_LOG(Warn, Shm, "consumer: {}; a write into a joined batch will fault without an "
           "explanation", guard.message());
  images = {};
  labels = {};
  ids = {};
  for (auto& t : tensors) t = {};
  return Status::Ok();
}

Status SealOwnedPieces(const ConsumerCore& c, std::vector<Piece>* pieces) {
  std::string what;
  for (Piece& p : *pieces) {
    if (p.owned == nullptr || p.owned->sealed()) continue;
    if (what.empty())
      what = fmt::format("batch memory this consumer joined from producer batches of the "
                         "leader at {} (pid {})", shm::DisplayAddress(c.address),
                         c.ring->header()->leader_pid);
    BC_RETURN_IF_ERROR(p.owned->Seal(what));
  }
  return Status::Ok();
}

// Per-producer-batch carving (carve_offset, carve_shuffle, progressive resizing): k carves
// of b; positions >= n + offset repeat samples this consumer already got from this batch.
std::vector<Piece> PerBatchPieces(const shm::SlotDesc* d, uint32_t b, uint32_t flags,
                                  uint64_t order_seed) {
  const shm::CarvePlan plan = shm::PlanCarves(d->seq, d->num_samples, d->tail, b, flags,
                                              order_seed);
  std::vector<Piece> pieces;
  const uint64_t fresh_end = uint64_t(d->num_samples) + plan.offset;
  for (uint32_t carve : plan.order) {
    const uint64_t start = plan.offset + uint64_t(carve) * b, end = start + b;
    const uint64_t repeats = end > fresh_end ? end - std::max(start, fresh_end) : 0;
    pieces.push_back({static_cast<uint32_t>(start), b, static_cast<uint32_t>(repeats), nullptr});
  }
  return pieces;
}

// Exact carving (carving.h PlanExact) of producer batch `a`: joins the samples carried from
// the producer batches before it, hands out in-place batches, carries the rest.
Status ExactPieces(ConsumerCore& c, const shm::AcquiredBatch& a, uint32_t b,
                   std::vector<Piece>* out) {
  const shm::SlotDesc* d = a.desc;
  const bool last = (d->flags & shm::kLastInEpoch) != 0;
  const uint32_t carried = c.carry ? c.carry->count : 0;
  // Resuming: the samples before the consumer's position are skipped (o: slot offset).
  const uint32_t o = static_cast<uint32_t>(std::min<uint64_t>(d->num_samples,
                                                              c.SkipInEpoch(*d)));
  c.epoch_pos += d->num_samples;
  const shm::ExactCarve x = shm::PlanExact(carried, d->num_samples - o, b, last,
                                           c.options.drop_last, c.options.pad_last);
  // The slot's last d->repeats samples repeat another consumer's (a shard tail the leader cut,
  // producer/distribution.h): the in-place batches over them report them.
  const size_t first_piece = out->size();
  auto report = [&] {
    const uint32_t from = d->num_samples - std::min(d->repeats, d->num_samples);
    for (size_t i = first_piece; i < out->size(); ++i) {
      Piece& p = (*out)[i];
      if (p.owned != nullptr) continue;
      const uint32_t lo = std::max(p.start, from), hi = std::min(p.start + p.size, d->num_samples);
      if (hi > lo) p.repeats += hi - lo;
    }
  };
  auto append = [&](uint32_t begin, uint32_t k) -> Status {
    if (k == 0) return Status::Ok();
    if (!c.carry) c.carry = std::make_shared<OwnedSamples>();
    c.stats.copied += k;
    return c.carry->Append(d, a.data, o + begin, k);
  };
  BC_RETURN_IF_ERROR(append(0, x.join));
  if (x.joined_batch) out->push_back({0, b, 0, std::exchange(c.carry, nullptr)});
  for (uint32_t i = 0; i < x.count; ++i) out->push_back({o + x.first + i * b, b, 0, nullptr});
  if (x.final_in_place) {
    out->push_back({o + x.rest_begin, x.final_size, 0, nullptr});
    report();
    return Status::Ok();
  }
  report();
  BC_RETURN_IF_ERROR(append(x.rest_begin, x.rest));
  if (x.final_size > 0) {
    if (x.final_repeats > 0) c.carry->Pad(b);
    out->push_back({0, x.final_size, x.final_repeats, std::exchange(c.carry, nullptr)});
  } else if (last) {
    c.carry.reset();  // drop_last: the epoch's partial batch is dropped
  }
  return Status::Ok();
}

// Sharded carving (carving.h PlanShard) of producer batch `a`: this rank's batches, whole
// ones in place, spanning ones joined; the epoch's tail global batch is collected and cut
// at the epoch's last producer batch.
Status ShardPieces(ConsumerCore& c, const shm::AcquiredBatch& a, uint32_t b,
                   std::vector<Piece>* out) {
  const shm::SlotDesc* d = a.desc;
  const auto segments = shm::PlanShard(c.epoch_pos, d->num_samples,
                                       c.ring->header()->epoch_samples, b, c.shard_world,
                                       c.shard_rank);
  const uint64_t skip = c.SkipInEpoch(*d);  // resuming: before the consumer's position
  c.epoch_pos += d->num_samples;
  auto append = [&](std::shared_ptr<OwnedSamples>* to, const shm::ShardSegment& seg) {
    if (!*to) *to = std::make_shared<OwnedSamples>();
    c.stats.copied += seg.count;
    return (*to)->Append(d, a.data, seg.begin, seg.count);
  };
  for (const shm::ShardSegment& seg : segments) {
    if (seg.begin < skip) continue;  // positions are global-batch aligned: whole segments
    if (seg.whole) {
      out->push_back({seg.begin, b, 0, nullptr});
      continue;
    }
    BC_RETURN_IF_ERROR(append(seg.tail ? &c.shard_tail : &c.carry, seg));
    if (seg.ends_batch) out->push_back({0, b, 0, std::exchange(c.carry, nullptr)});
  }
  if (!(d->flags & shm::kLastInEpoch)) return Status::Ok();
  if (c.carry)  // the epoch ended early (skipped samples): what there is, as it is
    out->push_back({0, c.carry->count, 0, std::exchange(c.carry, nullptr)});
  std::shared_ptr<OwnedSamples> tail = std::exchange(c.shard_tail, nullptr);
  const uint32_t tail_n = tail ? tail->count : 0;
  const shm::ShardTail part = shm::ShardTailPart(tail_n, b, c.shard_world, c.shard_rank,
                                                 c.options.drop_last, c.options.pad_last);
  if (part.size == 0) return Status::Ok();
  auto mine = std::make_shared<OwnedSamples>();
  for (uint32_t i = 0; i < part.per; ++i) mine->AppendSample(*tail, (part.begin + i) % tail_n);
  if (part.size > part.per) mine->Pad(part.size);
  out->push_back({0, part.size, part.repeats, std::move(mine)});
  return Status::Ok();
}

PieceViews ViewPiece(const ConsumerCore& c, const Piece& piece, BatchInfo* info) {
  const shm::SlotDesc* d = c.cur.desc;
  const uint8_t *images, *labels;
  PieceViews v;
  const shm::SlotDesc* geo = d;
  if (piece.owned) {
    geo = &piece.owned->desc;
    images = piece.owned->ImagesData();
    labels = reinterpret_cast<const uint8_t*>(piece.owned->LabelsData());
    v.ids = piece.owned->IdsData();
  } else {
    const uint8_t* data = c.cur.data;
    images = data + d->images_offset + uint64_t(piece.start) * d->sample_bytes;
    labels = data + d->labels_offset + uint64_t(piece.start) * sizeof(int64_t);
    v.ids = reinterpret_cast<const int64_t*>(data + d->ids_offset) + piece.start;
  }
  v.images = ImageView(*geo, images, piece.size);
  v.num_tensors = std::min(geo->num_tensors, shm::kMaxTensors);
  for (uint32_t t = 0; t < v.num_tensors; ++t) {
    const shm::TensorDesc& td = geo->tensors[t];
    v.names[t] = td.name;
    if (shm::IsVariableLength(td)) {
      if (piece.owned) {  // its own rows and offsets, from 0
        static const int64_t kNoOffsets[1] = {0};
        const std::vector<int64_t>& off = piece.owned->offsets[t];
        const bool some = off.size() > piece.size;  // (a piece of no sample has none)
        v.tensors[t] = ValuesView(td, piece.owned->TensorData(t),
                                  some ? uint64_t(off[piece.size]) : 0);
        v.offsets[t] = OffsetsView(some ? off.data() : kNoOffsets, some ? piece.size : 0);
        continue;
      }
      if (!v.ragged) v.ragged = std::make_shared<RaggedCopies>();
      ViewRaggedInPlace(*d, c.cur.data, t, piece.start, piece.size, v.ragged.get(), &v);
      continue;
    }
    const uint8_t* first = piece.owned ? piece.owned->TensorData(t)
                                       : c.cur.data + td.offset + uint64_t(piece.start) * td.sample_bytes;
    v.tensors[t] = NamedView(td, first, piece.size);
  }
  v.labels.data = const_cast<uint8_t*>(labels);
  v.labels.dtype = DType::kInt64;
  v.labels.ndim = 1;
  v.labels.shape[0] = piece.size;
  v.labels.nbytes = piece.size * sizeof(int64_t);
  info->repeats = static_cast<int32_t>(piece.repeats);
  info->size = piece.size;
  info->image_size = d->image_size;
  info->channels_last = d->layout == 1;
  info->epoch = d->epoch;
  info->producer_seq = d->seq;
  info->producer_batch = d->batch_in_epoch;
  return v;
}

}  // namespace batchcast::internal

namespace batchcast::internal {

namespace {

// A variable-length tensor's place in a slot of slot_bytes: n + 1 offsets, then its values.
bool RaggedFits(const shm::TensorDesc& td, uint64_t n, uint64_t slot_bytes) {
  return td.ndim >= 1 && td.offset <= slot_bytes &&
         n + 1 <= (slot_bytes - td.offset) / sizeof(int64_t) && td.values_offset <= slot_bytes &&
         td.values_bytes <= slot_bytes - td.values_offset;
}

// Its row offsets: from 0, never decreasing, within its values.
bool RaggedOffsetsValid(const shm::TensorDesc& td, const uint8_t* data, uint64_t n) {
  const auto* off = reinterpret_cast<const int64_t*>(data + td.offset);
  if (off[0] != 0) return false;
  for (uint64_t i = 0; i < n; ++i)
    if (off[i + 1] < off[i]) return false;
  return uint64_t(off[n]) <= td.values_bytes / td.sample_bytes;
}

}  // namespace

Status CheckTensorDescs(const shm::SlotDesc& d, const uint8_t* data, uint64_t slot_bytes) {
  if (d.num_tensors > shm::kMaxTensors)
    return CorruptDataError("consumer: producer batch {} describes {} named tensors, more than "
                            "the {} a slot holds: is the leader another Batchcast version?",
                            d.seq, d.num_tensors, shm::kMaxTensors);
  const uint64_t positions = uint64_t(d.num_samples) + d.tail;
  for (uint32_t t = 0; t < d.num_tensors; ++t) {
    const shm::TensorDesc& td = d.tensors[t];
    const bool named = std::memchr(td.name, 0, sizeof(td.name)) != nullptr && td.name[0] != 0;
    const bool variable = shm::IsVariableLength(td);
    const bool fits = td.ndim <= shm::kTensorMaxDims && td.sample_bytes > 0 &&
                      td.sample_bytes <= slot_bytes && td.offset <= slot_bytes &&
                      (variable ? RaggedFits(td, d.num_samples, slot_bytes)
                                : positions <= (slot_bytes - td.offset) / td.sample_bytes);
    if (!named || !fits)
      return CorruptDataError("consumer: named tensor {} of producer batch {} has a bad "
                              "descriptor (name, {} dimensions, {} bytes per sample at offset "
                              "{} in a slot of {}): is the leader another Batchcast version?",
                              t, d.seq, td.ndim, td.sample_bytes, td.offset, slot_bytes);
    if (variable && !RaggedOffsetsValid(td, data, d.num_samples))
      return CorruptDataError("consumer: variable-length tensor '{}' of producer batch {} has "
                              "row offsets that do not start at 0, decrease, or pass its {} "
                              "bytes of values: is the leader another Batchcast version?",
                              td.name, d.seq, td.values_bytes);
  }
  return Status::Ok();
}

}  // namespace batchcast::internal
