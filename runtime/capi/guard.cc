// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "capi/guard.h"

#include <sstream>

namespace batchcast::capi {
namespace {
thread_local std::string t_last_error;
}  // namespace

std::vector<std::string> SplitWords(const char* text) {
  std::vector<std::string> words;
  if (text == nullptr) return words;
  std::istringstream in(text);
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

const char* LastError() { return t_last_error.c_str(); }

bc_status_t Fail(bc_status_t code, std::string message) {
  t_last_error = std::move(message);
  return code;
}

}  // namespace batchcast::capi
