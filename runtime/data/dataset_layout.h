// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Names and constants of the Batchcast HDF5 dataset layout (docs/dataset-format.md),
// shared by the writer and the reader.
#pragma once

#include <cstdint>

namespace batchcast::data::layout {

inline constexpr int kSchemaVersion = 1;
inline constexpr char kSchemaAttr[] = "batchcast_schema_version";  // root, int
inline constexpr char kCompleteAttr[] = "batchcast_complete";       // root, int 1, written last
inline constexpr char kCreatedByAttr[] = "batchcast_created_by";    // root, string (provenance)
inline constexpr char kEncodingAttr[] = "encoding";                 // on images: raw|jpeg|png|mixed
inline constexpr char kImages[] = "images";
inline constexpr char kLabels[] = "labels";
inline constexpr char kClassNames[] = "class_names";
inline constexpr char kWidths[] = "widths";
inline constexpr char kHeights[] = "heights";
// Per-sample checksums (optional; files written before them have none): uint64, one per
// sample, xxh3-64 of the sample's stored bytes with the sample's label as the seed
// (data::SampleChecksum), so a changed byte or a changed label is found.
inline constexpr char kChecksums[] = "checksums";
// Offline progressive-resizing buckets (optional): buckets/<size>/images, vlen uint8, one
// encoded image (JPEG or PNG) per sample, shorter side = <size> (never upscaled), same
// sample order as `images`; `encoding` attribute as on `images`.
inline constexpr char kBuckets[] = "buckets";
inline constexpr int kMaxBuckets = 64;

// Limits on what a file may declare, checked before any size is computed from it.
inline constexpr int64_t kMaxSamples = int64_t(1) << 40;
inline constexpr int64_t kMaxRawSide = 65535;  // raw height and width

// Raw chunks hold about this many bytes (whole samples, at least one): small enough that a
// random read decompresses little, large enough that the chunk index stays small.
inline constexpr int64_t kRawChunkTargetBytes = 64 << 10;
inline constexpr int64_t kRawChunkMaxSamples = 256;
// Encoded (vlen) chunks: elements per chunk of the heap-reference array (16 bytes each).
inline constexpr int64_t kVlenChunkSamples = 1024;

}  // namespace batchcast::data::layout
