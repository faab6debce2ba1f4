// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "multimodel/schedule.h"

#include <algorithm>
#include <numeric>

namespace batchcast::multimodel {
namespace {

// One epoch of each model of `group` in turn until each has had its `left` epochs.
void RoundRobin(const std::vector<int>& group, std::vector<int> left, std::vector<Turn>* out) {
  for (bool any = true; any;) {
    any = false;
    for (int m : group) {
      if (left[size_t(m)] == 0) continue;
      --left[size_t(m)];
      out->push_back({m, 1});
      any = true;
    }
  }
}

}  // namespace

std::vector<Turn> PlanTurns(const TrainManyConfig& c, const std::vector<int64_t>& params,
                            const std::vector<int>& epochs_left) {
  std::vector<Turn> turns;
  std::vector<int> order(c.models.size());
  std::iota(order.begin(), order.end(), 0);
  std::erase_if(order, [&](int m) { return epochs_left[size_t(m)] <= 0; });
  auto all_of_each = [&] {
    for (int m : order) turns.push_back({m, epochs_left[size_t(m)]});
  };
  switch (c.policy) {
    case Policy::kConcurrent: break;
    case Policy::kFcfs: all_of_each(); break;
    case Policy::kSjf:
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        if (c.sjf_by == SjfBy::kParams) return params[size_t(a)] < params[size_t(b)];
        return c.models[size_t(a)].epochs < c.models[size_t(b)].epochs;
      });
      all_of_each();
      break;
    case Policy::kRoundRobin: RoundRobin(order, epochs_left, &turns); break;
    case Policy::kPriority:
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return c.models[size_t(a)].priority > c.models[size_t(b)].priority;
      });
      for (size_t i = 0; i < order.size();) {  // each group of equal priority, round-robin
        size_t j = i;
        while (j < order.size() &&
               c.models[size_t(order[j])].priority == c.models[size_t(order[i])].priority)
          ++j;
        RoundRobin(std::vector<int>(order.begin() + long(i), order.begin() + long(j)), epochs_left,
                   &turns);
        i = j;
      }
      break;
  }
  return turns;
}

}  // namespace batchcast::multimodel
