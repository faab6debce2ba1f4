// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// "Did you mean" hints for option keys, CLI subcommands and flags: the closest candidate by
// edit distance, if it is close enough to be a typo of it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace batchcast {

// Levenshtein distance (insertions, deletions, substitutions).
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word` within `max_distance`, or "" when none is that close.
std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates,
                         size_t max_distance = 3);

// Whether `word` is probably a typo of `candidate`: distance 1 for candidates of up to 4
// characters, 2 for longer ones (and never the same word).
bool LooksLikeTypo(std::string_view word, std::string_view candidate);

}  // namespace batchcast
