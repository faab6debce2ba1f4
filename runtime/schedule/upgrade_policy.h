// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Which samples move up a bucket after an epoch.
//
// The schedule decides how many samples leave each bucket (the arithmetic, so bucket
// occupancy is exact and the same for every policy); a policy decides which ones. A
// policy must be a pure function of its arguments: the stream is a function of the
// seed, so a policy that reads anything else (losses, wall time) breaks resume.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::schedule {

struct UpgradeContext {
  uint64_t seed = 0;  // already derived for (run seed, epoch, bucket); use it directly
  int epoch = 0;      // the epoch that just ended
  int bucket = 0;     // the bucket the candidates are in; they move to bucket + 1
};

class UpgradePolicy {
 public:
  virtual ~UpgradePolicy() = default;
  virtual std::string_view Name() const = 0;

  // Chooses exactly `count` distinct samples out of `candidates` (ascending sample
  // indices, all in context.bucket, count <= candidates.size()) and appends them to
  // `chosen`. The schedule checks the answer and fails the epoch if it is not.
  virtual void SelectUpgrades(const UpgradeContext& context, std::span<const int64_t> candidates,
                              size_t count, std::vector<int64_t>* chosen) const = 0;
};

// Uniformly random subset, seeded.
class RandomUpgradePolicy final : public UpgradePolicy {
 public:
  std::string_view Name() const override { return "random"; }
  void SelectUpgrades(const UpgradeContext& context, std::span<const int64_t> candidates,
                      size_t count, std::vector<int64_t>* chosen) const override;
};

// The built-in policies by spec name ("random").
[[nodiscard]] Result<std::shared_ptr<const UpgradePolicy>> MakeUpgradePolicy(std::string_view name);
bool IsKnownUpgradePolicy(std::string_view name);
std::vector<std::string_view> UpgradePolicyNames();
std::string KnownUpgradePolicies();  // "random" (for messages)

}  // namespace batchcast::schedule
