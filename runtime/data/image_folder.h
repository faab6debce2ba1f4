// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Walks an ImageFolder tree: root/<class>/<...>/<image>.jpg|jpeg|png (extensions in any
// case). Classes are the sub-directories of root sorted by name (byte order, as Python's
// sorted() does), so label i is the i-th class; files are sorted by path within a class.
// Other files are ignored and counted; hidden entries (leading '.') are skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::data {

struct ImageFolderEntry {
  std::string path;
  int64_t label = 0;
};

struct ImageFolderListing {
  std::vector<std::string> class_names;
  std::vector<ImageFolderEntry> files;  // by class, then by path
  int64_t ignored_files = 0;            // files without an image extension
};

Result<ImageFolderListing> ListImageFolder(const std::string& root);

}  // namespace batchcast::data
