// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/spec.h"

#include <gtest/gtest.h>

#include "tests/unit/core/scoped_env.h"

namespace batchcast::telemetry {
namespace {

TEST(TelemetrySpecTest, OffForms) {
  for (const char* text : {"", "off", "none", " off "}) {
    auto s = ParseTelemetrySpec(text);
    ASSERT_TRUE(s.ok()) << text;
    EXPECT_FALSE(s->enabled) << text;
  }
  auto on = ParseTelemetrySpec("on");
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->enabled);
  EXPECT_TRUE(on->sinks.hdf5.empty());
  EXPECT_TRUE(on->sinks.print_summary);
}

TEST(TelemetrySpecTest, FullSpec) {
  auto s = ParseTelemetrySpec(
      "telemetry(hdf5=run.h5,csv=run.csv,json=r.json,trace=run.trace.json,interval=250ms,"
      "rows=100,spans=4096,gpu=off,summary=no)");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->enabled);
  EXPECT_EQ(s->sinks.hdf5, "run.h5");
  EXPECT_EQ(s->sinks.csv, "run.csv");
  EXPECT_EQ(s->sinks.json, "r.json");
  EXPECT_EQ(s->sinks.trace, "run.trace.json");
  EXPECT_EQ(s->collector.interval_ms, 250);
  EXPECT_EQ(s->collector.max_rows, 100);
  EXPECT_EQ(s->collector.max_spans, 4096);
  EXPECT_FALSE(s->collector.gpu);
  EXPECT_FALSE(s->sinks.print_summary);
  auto bare = ParseTelemetrySpec("hdf5=x.h5, interval=2s");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->collector.interval_ms, 2000);
}

TEST(TelemetrySpecTest, ErrorsPointAtThePosition) {
  auto s = ParseTelemetrySpec("telemetry(hdf5=a.h5,hfd5=b.h5)");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("unknown key 'hfd5'"), std::string::npos);
  EXPECT_NE(s.status().message().find("position 20"), std::string::npos);
  EXPECT_FALSE(ParseTelemetrySpec("telemetry(hdf5=a.h5").ok());
  EXPECT_FALSE(ParseTelemetrySpec("interval=fast").ok());
  EXPECT_FALSE(ParseTelemetrySpec("interval=1ms").ok());
  EXPECT_FALSE(ParseTelemetrySpec("hdf5").ok());
  EXPECT_FALSE(ParseTelemetrySpec("hdf5=").ok());
  // The fuzzer's input: an interval that overflows int64 in milliseconds.
  auto huge = ParseTelemetrySpec("interval=20000000209482764s");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("bad value '20000000209482764s' for 'interval'"),
            std::string::npos) << huge.status().ToString();
}

TEST(TelemetrySpecTest, RunDirectoryForms) {
  auto a = ParseTelemetrySpec("dir:/runs/sweep1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->enabled);
  EXPECT_EQ(a->dir, "/runs/sweep1");
  EXPECT_TRUE(a->sinks.hdf5.empty());
  auto b = ParseTelemetrySpec("telemetry(dir=r,trace=on,json=1,csv=off,interval=250ms,energy=off)");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->dir, "r");
  EXPECT_EQ(b->sinks.trace, "on");
  EXPECT_EQ(b->sinks.json, "on");
  EXPECT_TRUE(b->sinks.csv.empty());
  EXPECT_FALSE(b->collector.energy);
  EXPECT_EQ(b->collector.interval_ms, 250);
  auto c = ParseTelemetrySpec("telemetry(hdf5=x.h5,json=off)");  // off without dir: disabled
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->sinks.json.empty());
}

TEST(TelemetrySpecTest, RunDirectoryMisuseIsRefusedWithTheFix) {
  auto both = ParseTelemetrySpec("telemetry(dir=r,hdf5=x.h5)");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("drop hdf5="), std::string::npos);
  auto path = ParseTelemetrySpec("telemetry(dir=r,json=x.json)");
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find("write json=on"), std::string::npos);
  auto on = ParseTelemetrySpec("trace=on");
  ASSERT_FALSE(on.ok());
  EXPECT_NE(on.status().message().find("needs a run directory (dir=RUN)"), std::string::npos)
      << on.status().message();
  auto empty = ParseTelemetrySpec("dir:");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty run directory"), std::string::npos);
}

TEST(TelemetrySpecTest, OptionsCarryTheSpecAndTags) {
  ScopedEnv env({{"BATCHCAST_TELEMETRY", "telemetry(csv=x.csv,gpu=off,interval=5s)"},
                 {"BATCHCAST_EXPERIMENT", "sweep"}});
  auto o = ResolveOptions({"--workload=pair", "--run-name=trial7"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->telemetry, "telemetry(csv=x.csv,gpu=off,interval=5s)");
  Sinks sinks;
  auto c = CreateCollector(*o, OutputIdentity{ProcessKind::kConsumer, 3, false, ""}, 1,
                           Role::kConsumer, &sinks);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_NE(c->get(), nullptr);
  EXPECT_EQ(sinks.csv, "x.csv");
  EXPECT_EQ((*c)->tags().experiment, "sweep");
  EXPECT_EQ((*c)->tags().workload, "pair");
  EXPECT_EQ((*c)->tags().run, "trial7");
  EXPECT_EQ((*c)->tags().rank, 3);
  EXPECT_FALSE((*c)->tags().host.empty());
}

TEST(TelemetrySpecTest, OffGivesANullCollectorAndBadSpecAnError) {
  Options o;
  const OutputIdentity who{ProcessKind::kLeader, 0, false, ""};
  auto none = CreateCollector(o, who, 0, Role::kLeader, nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->get(), nullptr);
  o.telemetry = "telemetry(bogus=1)";
  auto bad = CreateCollector(o, who, 0, Role::kLeader, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("option 'telemetry'"), std::string::npos);
}

}  // namespace
}  // namespace batchcast::telemetry
