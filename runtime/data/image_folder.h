// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Walks an ImageFolder tree: root/<class>/<...>/<image>.jpg|jpeg|png (extensions in any
// case). Classes are the sub-directories of root sorted by name (byte order, as Python's
// sorted() does), so label i is the i-th class; files are sorted by path within a class.
// Other files are ignored and listed with the reason (e.g. an unsupported extension such as
// .webp); hidden entries (leading '.') are skipped silently. Class directories without any
// image are listed in empty_classes (the converter refuses them unless allowed).
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

// A file that is not converted, and why ("unsupported extension '.webp' ...").
struct IgnoredFile {
  std::string path;
  std::string reason;
};

struct ImageFolderListing {
  std::vector<std::string> class_names;
  std::vector<ImageFolderEntry> files;     // by class, then by path
  std::vector<IgnoredFile> ignored;        // files without an image extension, by path
  std::vector<std::string> empty_classes;  // class directories with no image file
};

Result<ImageFolderListing> ListImageFolder(const std::string& root);

}  // namespace batchcast::data
