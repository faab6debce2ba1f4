// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/suggest.h"

#include <algorithm>

namespace batchcast {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates,
                         size_t max_distance) {
  std::string best;
  size_t best_d = max_distance + 1;
  for (const std::string& c : candidates) {
    size_t d = EditDistance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

bool LooksLikeTypo(std::string_view word, std::string_view candidate) {
  size_t d = EditDistance(word, candidate);
  return d > 0 && d <= (candidate.size() <= 4 ? 1u : 2u);
}

}  // namespace batchcast
