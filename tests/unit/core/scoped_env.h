// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Sets (or, with std::nullopt, unsets) environment variables for one scope and restores the
// previous values. Batchcast reads the environment only through core/environment.h, which
// reads it live, so what a scope sets is what the code under test sees.
#pragma once

#include <stdlib.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace batchcast {

class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::optional<std::string>>> vars) {
    for (auto& [k, v] : vars) {
      const char* old = getenv(k.c_str());
      saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      if (v) setenv(k.c_str(), v->c_str(), 1);
      else unsetenv(k.c_str());
    }
  }
  // In reverse: a name given twice gets back the value from before the first.
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) setenv(it->first.c_str(), it->second->c_str(), 1);
      else unsetenv(it->first.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace batchcast
