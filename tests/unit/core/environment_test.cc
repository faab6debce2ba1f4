// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The environment view (core/environment.h): the table, live reads, the launcher
// conventions decided once, and options read from the environment through the registry.
#include "core/environment.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "tests/unit/core/scoped_env.h"

namespace batchcast {
namespace {

using env::Var;

// Every launcher variable the conventions look at, unset: each test sets what it needs.
ScopedEnv NoLauncher() {
  return ScopedEnv({{"RANK", std::nullopt}, {"WORLD_SIZE", std::nullopt},
                    {"LOCAL_RANK", std::nullopt}, {"OMPI_COMM_WORLD_RANK", std::nullopt},
                    {"OMPI_COMM_WORLD_SIZE", std::nullopt},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", std::nullopt},
                    {"OMPI_MCA_ess_base_jobid", std::nullopt}, {"PMIX_RANK", std::nullopt},
                    {"PMIX_NAMESPACE", std::nullopt}, {"PMI_RANK", std::nullopt},
                    {"PMI_SIZE", std::nullopt}, {"SLURM_PROCID", std::nullopt},
                    {"SLURM_LOCALID", std::nullopt}, {"SLURM_JOB_ID", std::nullopt},
                    {"BATCHCAST_ADDRESS", std::nullopt}, {"BATCHCAST_SOCKET", std::nullopt}});
}

TEST(EnvironmentTest, TableFollowsTheEnumAndNamesEachVariableOnce) {
  const auto& vars = env::Variables();
  ASSERT_EQ(vars.size(), static_cast<size_t>(Var::kCount));
  std::set<std::string> names;
  for (size_t i = 0; i < vars.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(vars[i].var), i) << vars[i].name;
    EXPECT_TRUE(names.insert(vars[i].name).second) << vars[i].name << " twice";
    EXPECT_STRNE(vars[i].set_by, "");
    EXPECT_STRNE(vars[i].use, "");
    EXPECT_STREQ(env::Name(vars[i].var), vars[i].name);
    // Batchcast's own rows are exactly the BATCHCAST_* names: the registry skips them.
    EXPECT_EQ(env::IsOwnVariable(vars[i].name),
              std::string(vars[i].name).rfind("BATCHCAST_", 0) == 0)
        << vars[i].name;
  }
  EXPECT_TRUE(env::IsOwnVariable("BATCHCAST_STAGE_MODULE"));
  EXPECT_FALSE(env::IsOwnVariable("BATCHCAST_BATCH_SIZE"));  // an option, not a row
  EXPECT_FALSE(env::IsOwnVariable("BATCHCAST_TEST_KEEP_SHM"));  // read by nothing
}

TEST(EnvironmentTest, GetReadsTheLiveEnvironmentAndTreatsEmptyAsUnset) {
  {
    ScopedEnv e({{"SLURMD_NODENAME", std::string("node7")}});
    EXPECT_EQ(env::Get(Var::kSlurmdNodeName), "node7");
  }
  {
    ScopedEnv e({{"SLURMD_NODENAME", std::string("")}});
    EXPECT_FALSE(env::Get(Var::kSlurmdNodeName).has_value());
  }
  ScopedEnv e({{"SLURMD_NODENAME", std::nullopt}});
  EXPECT_FALSE(env::Get(Var::kSlurmdNodeName).has_value());
}

TEST(EnvironmentTest, GetIntNamesTheVariableTheValueAndWhoSetsIt) {
  ScopedEnv e({{"WORLD_SIZE", std::string("4")}});
  auto ok = env::GetInt(Var::kWorldSize, 1, 100);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(**ok, 4);
  for (const char* bad : {"four", "4x", "0", "101", "99999999999999999999999"}) {
    ScopedEnv b({{"WORLD_SIZE", std::string(bad)}});
    auto r = env::GetInt(Var::kWorldSize, 1, 100);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(std::string("WORLD_SIZE='") + bad + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("from 1 to 100"), std::string::npos) << m;
    EXPECT_NE(m.find("torchrun"), std::string::npos) << m;
  }
  ScopedEnv unset({{"WORLD_SIZE", std::nullopt}});
  auto none = env::GetInt(Var::kWorldSize, 1, 100);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(EnvironmentTest, LauncherRankTakesTheFirstNumberInLauncherOrder) {
  ScopedEnv clean = NoLauncher();
  EXPECT_EQ(env::LauncherRank(), -1);
  ScopedEnv slurm({{"SLURM_PROCID", std::string("9")}});
  EXPECT_EQ(env::LauncherRank(), 9);
  ScopedEnv pmi({{"PMI_RANK", std::string("8")}});
  EXPECT_EQ(env::LauncherRank(), 8);
  ScopedEnv pmix({{"PMIX_RANK", std::string("7")}});
  EXPECT_EQ(env::LauncherRank(), 7);
  ScopedEnv ompi({{"OMPI_COMM_WORLD_RANK", std::string("6")}});
  EXPECT_EQ(env::LauncherRank(), 6);
  ScopedEnv garbage({{"RANK", std::string("first")}});  // not a number: the next one counts
  EXPECT_EQ(env::LauncherRank(), 6);
  ScopedEnv rank({{"RANK", std::string("5")}});
  EXPECT_EQ(env::LauncherRank(), 5);
}

TEST(EnvironmentTest, LauncherLocalRankRefusesAValueThatIsNoRank) {
  ScopedEnv clean = NoLauncher();
  auto none = env::LauncherLocalRank();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ScopedEnv slurm({{"SLURM_LOCALID", std::string("3")}});
  EXPECT_EQ(env::LauncherLocalRank()->value_or(-1), 3);
  ScopedEnv ompi({{"OMPI_COMM_WORLD_LOCAL_RANK", std::string("2")}});
  EXPECT_EQ(env::LauncherLocalRank()->value_or(-1), 2);
  ScopedEnv local({{"LOCAL_RANK", std::string("1")}});
  EXPECT_EQ(env::LauncherLocalRank()->value_or(-1), 1);
  ScopedEnv bad({{"LOCAL_RANK", std::string("-1")}});
  auto r = env::LauncherLocalRank();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("LOCAL_RANK='-1'"), std::string::npos)
      << r.status().message();
}

TEST(EnvironmentTest, JobIdAddressAndMpiLauncher) {
  ScopedEnv clean = NoLauncher();
  EXPECT_EQ(env::LauncherJobId(), "");
  EXPECT_FALSE(env::LeaderAddress().has_value());
  EXPECT_FALSE(env::UnderMpiLauncher());
  {
    ScopedEnv e({{"OMPI_MCA_ess_base_jobid", std::string("111")},
                 {"PMIX_NAMESPACE", std::string("prte-1")}});
    EXPECT_EQ(env::LauncherJobId(), "prte-1");
    ScopedEnv slurm({{"SLURM_JOB_ID", std::string("4242")}});
    EXPECT_EQ(env::LauncherJobId(), "4242");
  }
  {
    ScopedEnv e({{"BATCHCAST_SOCKET", std::string("old")}});
    EXPECT_EQ(env::LeaderAddress(), "old");
    ScopedEnv a({{"BATCHCAST_ADDRESS", std::string("new")}});
    EXPECT_EQ(env::LeaderAddress(), "new");
  }
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    ScopedEnv e({{var, std::string("2")}});
    EXPECT_TRUE(env::UnderMpiLauncher()) << var;
  }
}

TEST(EnvironmentTest, SnapshotHoldsEveryVariable) {
  ScopedEnv e({{"BC_ENVIRONMENT_TEST", std::string("a=b")}});
  int seen = 0;
  for (const auto& [name, value] : env::Snapshot())
    if (name == "BC_ENVIRONMENT_TEST") {
      EXPECT_EQ(value, "a=b");  // the first '=' splits
      ++seen;
    }
  EXPECT_EQ(seen, 1);
}

TEST(EnvironmentTest, ApplyOptionParsesOneVariableWithTheRegistry) {
  {
    ScopedEnv e({{"BATCHCAST_TRAINERS_PER_GPU", std::nullopt}});
    Options o;
    ASSERT_TRUE(env::ApplyOption("trainers_per_gpu", &o).ok());
    EXPECT_EQ(o.trainers_per_gpu, Options().trainers_per_gpu);
    EXPECT_TRUE(o.sources.empty());
  }
  {
    ScopedEnv e({{"BATCHCAST_TRAINERS_PER_GPU", std::string("3")},
                 {"BATCHCAST_BATCH_SIZE", std::string("7")}});
    Options o;
    ASSERT_TRUE(env::ApplyOption("trainers-per-gpu", &o).ok());
    EXPECT_EQ(o.trainers_per_gpu, 3);
    EXPECT_EQ(o.batch_size, Options().batch_size);  // only the option asked for
    ASSERT_EQ(o.sources.size(), 1u);
    EXPECT_EQ(o.sources[0].second, "env");
  }
  {
    ScopedEnv e({{"BATCHCAST_TRAINERS_PER_GPU", std::string("two")}});
    Options o;
    Status s = env::ApplyOption("trainers_per_gpu", &o);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("environment variable BATCHCAST_TRAINERS_PER_GPU"),
              std::string::npos) << s.message();
    EXPECT_NE(s.message().find("'two' is not a number"), std::string::npos) << s.message();
  }
  Options o;
  EXPECT_EQ(env::ApplyOption("trainers_per_gpus", &o).code(), StatusCode::kInvalidArgument);
}

TEST(EnvironmentTest, ResolveOptionsReadsTheConfigFileNamedByTheEnvironment) {
  const std::string path = ::testing::TempDir() + "/bc_env_config.toml";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("batch_size = 12\n", f);
    std::fclose(f);
  }
  ScopedEnv e({{"BATCHCAST_CONFIG", path}, {"BATCHCAST_STAGE_MODULE", std::string("/x.so")}});
  auto r = ResolveOptions({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batch_size, 12);
}

}  // namespace
}  // namespace batchcast
