// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "schedule/upgrade_policy.h"

#include <algorithm>

#include "core/errors.h"
#include "schedule/internal/seeded_rng.h"

namespace batchcast::schedule {

void RandomUpgradePolicy::SelectUpgrades(const UpgradeContext& context,
                                         std::span<const int64_t> candidates, size_t count,
                                         std::vector<int64_t>* chosen) const {
  count = std::min(count, candidates.size());
  internal::SeededRng rng(context.seed);
  std::vector<int64_t> pool(candidates.begin(), candidates.end());
  rng.ChooseFront(std::span<int64_t>(pool), count);
  chosen->insert(chosen->end(), pool.begin(), pool.begin() + static_cast<ptrdiff_t>(count));
}

std::vector<std::string_view> UpgradePolicyNames() { return {"random"}; }

bool IsKnownUpgradePolicy(std::string_view name) {
  auto names = UpgradePolicyNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string KnownUpgradePolicies() {
  std::string out;
  for (auto n : UpgradePolicyNames()) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

Result<std::shared_ptr<const UpgradePolicy>> MakeUpgradePolicy(std::string_view name) {
  if (name == "random") return std::shared_ptr<const UpgradePolicy>(new RandomUpgradePolicy());
  return InvalidArgumentError("resize spec: unknown upgrade policy '{}' (known: {})", name,
                              KnownUpgradePolicies());
}

}  // namespace batchcast::schedule
