// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Internal HDF5 helpers for the data module: the superblock check before a file is opened,
// the filters `batchcast convert` may write, and (re-exported from core/hdf5_util.h) the
// handle, error, type and attribute helpers shared with telemetry.
// Every function here expects the caller to hold Hdf5Lock() (data/hdf5_lock.h).
#pragma once

#include <hdf5.h>

#include <string>

#include "batchcast/status.h"
#include "core/hdf5_util.h"

namespace batchcast::data {

// The HDF5 support shared with telemetry (core/hdf5_util.h), under the names data code uses.
using batchcast::DescribeType;
using batchcast::H5Id;
using batchcast::HasAttribute;
using batchcast::Hdf5Error;
using batchcast::Hdf5Init;
using batchcast::Hdf5String;
using batchcast::ReadIntAttribute;
using batchcast::ReadStringAttribute;
using batchcast::WriteDataset1D;
using batchcast::WriteDoubleAttribute;
using batchcast::WriteIntAttribute;
using batchcast::WriteStringAttribute;

// Reads and checks the superblock of the HDF5 file at `path` with plain reads, before any
// HDF5 call sees the file. HDF5 1.10 trusts these fields: a mutated superblock of a 50-byte
// file made H5Fopen allocate 3 GiB (tests/fuzz/corpus/fuzz_hdf5/regress-*superblock*). Checks, never more strictly
// than HDF5 itself: the signature (at byte 0, 512, 1024, ...), the version (0 to 3), the
// sizes of offsets and lengths, the superblock and its end-of-file address against the
// file's real size, the driver information block (versions 0 and 1), and the object
// headers of the root group and of the superblock extension: inside the file, with a first
// chunk and continuation chunks that end inside it. An error (kCorruptData; kNotFound/errno for an unreadable
// path) names the file, the field and what to do. Needs no Hdf5Lock().
Status CheckHdf5Superblock(const std::string& path);

// What an error about a damaged or unfinished dataset file tells the user to do.
inline constexpr char kRecreateWithConvert[] = "re-create it with `batchcast convert`";

// Chunk filters `batchcast convert --compression` can write, besides HDF5's own deflate.
inline constexpr int kLz4FilterId = 32004;  // registered HDF5 filter; hdf5-filter-plugin
// Fails when filter `id` can be neither found in HDF5 nor loaded as a plugin (Debian's HDF5
// searches /usr/lib/<triplet>/hdf5/serial/plugins, and HDF5_PLUGIN_PATH): the message names
// the filter, `what` needs it, and the package to install.
Status CheckFilterAvailable(int id, const std::string& what);

}  // namespace batchcast::data
