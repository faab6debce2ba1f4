// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The late-join window of every producer (producer/admission.h). Replay and next-epoch
// admission through a real leader are in tests/unit/node/dataplane_test.cc (LateJoiner*).
#include "producer/admission.h"

#include <gtest/gtest.h>

namespace batchcast::producer {
namespace {

TEST(AdmissionTest, WindowIsNeverZeroBatches) {
  // `batchcast serve`'s default 2% of a 10-batch epoch used to round to 0.
  EXPECT_EQ(LateJoinWindow(0.02, 10, 0), 1);
  EXPECT_EQ(LateJoinWindow(0.0, 10, 0), 1);
  EXPECT_EQ(LateJoinWindow(0.0, 1, 0), 1);
  EXPECT_EQ(LateJoinWindow(0.0, 0, 0), 1);
}

TEST(AdmissionTest, WindowIsAtLeastTheRingDepth) {
  // A trainer that attaches while the first filled the ring is caught up.
  EXPECT_EQ(LateJoinWindow(0.02, 100, 4), 4);
  EXPECT_EQ(LateJoinWindow(0.0, 100, 6), 6);
}

TEST(AdmissionTest, WindowRoundsTheFractionUpAndStaysWithinTheEpoch) {
  EXPECT_EQ(LateJoinWindow(0.1, 95, 4), 10);   // 9.5 -> 10
  EXPECT_EQ(LateJoinWindow(0.5, 100, 4), 50);
  EXPECT_EQ(LateJoinWindow(1.0, 3, 8), 3);     // never past the epoch
  EXPECT_EQ(LateJoinWindow(2.0, 10, 0), 10);   // fractions above 1 are clamped
}

}  // namespace
}  // namespace batchcast::producer
