// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Names and constants of the Batchcast HDF5 dataset layout (docs/dataset-format.md),
// shared by the writer and the reader.
#pragma once

#include <cstdint>

namespace batchcast::data::layout {

// The layout version (root attribute kSchemaAttr). 1: encoded samples are a vlen uint8
// dataset (one HDF5 heap object each). 2: encoded samples (and offline buckets) are a 1-D
// uint8 dataset of every sample's bytes plus kSampleOffsets / kSampleLengths, read without
// HDF5 (docs/dataset-format.md). Raw and stored-pixel files are the same in both; the writer
// writes the lowest version that describes the file, so they stay readable by older builds.
inline constexpr int kSchemaVersion = 2;
inline constexpr int kOldestSchemaVersion = 1;
inline constexpr int kIndexedBytesVersion = 2;  // encoded bytes + index from this version on
inline constexpr char kSchemaAttr[] = "batchcast_schema_version";  // root, int
inline constexpr char kCompleteAttr[] = "batchcast_complete";       // root, int 1, written last
inline constexpr char kCreatedByAttr[] = "batchcast_created_by";    // root, string (provenance)
inline constexpr char kEncodingAttr[] = "encoding";  // on images: raw|jpeg|png|mixed|pixels
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
// Stored pixels of varying shape (`convert --store decoded|resized:<size>`, encoding
// "pixels"): `images` is a 1-D uint8 array, sample i's H x W x C bytes (HWC) following sample
// i-1's; these int32 datasets give each sample's stored shape (the original size stays in
// widths/heights). Offsets are their running sum.
inline constexpr char kPixelsEncoding[] = "pixels";
inline constexpr char kStoredWidths[] = "stored_widths";
inline constexpr char kStoredHeights[] = "stored_heights";
inline constexpr char kStoredChannels[] = "stored_channels";
// Layout version 2, encoded samples: beside each 1-D uint8 `images` (the root's, and each
// buckets/<size>/images), sample i's first byte and byte count in it, uint64, N entries.
inline constexpr char kSampleOffsets[] = "sample_offsets";
inline constexpr char kSampleLengths[] = "sample_lengths";
// How the form was made (string attribute on `images`, e.g. "decoded", "resized:160"): what
// the converter's --store said, for inspect and provenance.
inline constexpr char kStoreAttr[] = "store";
inline constexpr int kMaxBuckets = 64;

// Limits on what a file may declare, checked before any size is computed from it.
inline constexpr int64_t kMaxSamples = int64_t(1) << 40;
inline constexpr int64_t kMaxRawSide = 65535;  // raw height and width

// Raw chunks hold about this many bytes (whole samples, at least one): small enough that a
// random read decompresses little, large enough that the chunk index stays small.
inline constexpr int64_t kRawChunkTargetBytes = 64 << 10;
inline constexpr int64_t kRawChunkMaxSamples = 256;
// Stored-pixel chunks (bytes of the 1-D `images`): about one mean sample, at least
// kPixelChunkMinBytes (PRESTO: samples under ~0.08 MB read slowly one by one, so small ones
// share a chunk that the reader's chunk cache keeps) and at most kPixelChunkMaxBytes.
inline constexpr int64_t kPixelChunkMinBytes = 64 << 10;
inline constexpr int64_t kPixelChunkMaxBytes = 4 << 20;
// Encoded (vlen, layout version 1) chunks: elements per chunk of the heap-reference array.
inline constexpr int64_t kVlenChunkSamples = 1024;
// Encoded bytes (layout version 2): chunks of a sixteenth of the first flush's bytes
// rounded up to 4 KiB, within these bounds, never filtered (JPEG and PNG bytes do not
// compress). The last chunk of a dataset is stored whole, so the bound is also the most a
// file grows by per bytes dataset; the reader looks every chunk's address up once at open.
inline constexpr int64_t kByteChunkMinBytes = 4 << 10;
inline constexpr int64_t kByteChunkMaxBytes = 1 << 20;
inline constexpr int64_t kByteChunkFlushShare = 16;
// An encoded sample may not claim more bytes than this (a damaged index must not make a
// reader allocate gigabytes).
inline constexpr uint64_t kMaxEncodedSampleBytes = uint64_t(1) << 30;

}  // namespace batchcast::data::layout
