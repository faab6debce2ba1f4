// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// SelectGpu reads its placement from the environment through the environment view and the
// options registry (core/environment.h): a value that is not a rank or a count is refused
// with the variable's name before any device is probed, so these run without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "batchcast/gpu.h"
#include "tests/unit/core/scoped_env.h"

namespace batchcast {
namespace {

TEST(GpuPlacementEnvTest, TrainersPerGpuIsParsedByTheRegistry) {
  ScopedEnv e({{"BATCHCAST_TRAINERS_PER_GPU", std::string("two")}});
  auto r = SelectGpu({0, 0});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind("gpu: environment variable BATCHCAST_TRAINERS_PER_GPU: option "
                    "'trainers_per_gpu': 'two' is not a number", 0), 0u) << m;
  ScopedEnv negative({{"BATCHCAST_TRAINERS_PER_GPU", std::string("-2")}});
  auto n = SelectGpu({0, 0});
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("BATCHCAST_TRAINERS_PER_GPU=-2 must be >= 0"),
            std::string::npos) << n.status().message();
}

TEST(GpuPlacementEnvTest, LocalRankFromTheLauncherMustBeARank) {
  ScopedEnv e({{"LOCAL_RANK", std::string("first")}, {"BATCHCAST_TRAINERS_PER_GPU", std::nullopt}});
  auto r = SelectGpu({-1, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("gpu: environment variable LOCAL_RANK='first'", 0), 0u)
      << r.status().message();
}

}  // namespace
}  // namespace batchcast
