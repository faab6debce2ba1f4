// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The one state.json parser (multimodel/progress.h) and the MPI front door's checks.
#include "multimodel/progress.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace batchcast::multimodel {
namespace {

namespace fs = std::filesystem;

class ModelProgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bc-progress-test-" + std::to_string(getpid()));
    fs::create_directories(dir_ / "mlp");
    config_.output_dir = dir_.string();
    spec_.name = "mlp";
  }
  void TearDown() override { fs::remove_all(dir_); }
  void WriteState(const std::string& text) {
    std::ofstream(StatePath(config_, spec_)) << text;
  }

  fs::path dir_;
  TrainManyConfig config_;
  ModelSpec spec_;
};

constexpr const char* kGood =
    R"({"epochs_done": 2, "steps": 8, "finished": false, "params": 10, "epochs": [{}, {}],
        "train_s": 1.5, "test_accuracy": -1, "position": [2, 0]})";

TEST_F(ModelProgressTest, MissingStateIsAFreshModel) {
  auto p = ReadModelProgress(config_, spec_);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->epochs_done, 0);
  EXPECT_FALSE(p->finished);
  EXPECT_FALSE(p->mid_epoch);
}

TEST_F(ModelProgressTest, ReadsWhatTheTrainerWrites) {
  WriteState(kGood);
  auto f = ReadModelStateFile(StatePath(config_, spec_), "mlp");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(f->has_value());
  const ModelStateFile& s = **f;
  EXPECT_EQ(s.progress.epochs_done, 2);
  EXPECT_EQ(s.progress.position.epoch, 2u);
  EXPECT_EQ(s.steps, 8);
  EXPECT_EQ(s.params, 10);
  EXPECT_EQ(s.epochs.size(), 2u);
  EXPECT_DOUBLE_EQ(s.train_s, 1.5);
  EXPECT_FALSE(s.progress.mid_epoch);
}

// A field of the wrong type was an uncaught json exception (std::terminate, no message).
TEST_F(ModelProgressTest, WrongTypeIsCorruptDataNamingFileAndField) {
  std::string text = kGood;
  text.replace(text.find("\"epochs_done\": 2"), 16, "\"epochs_done\": \"3\"");
  WriteState(text);
  auto p = ReadModelProgress(config_, spec_);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kCorruptData);
  const std::string msg = p.status().message();
  EXPECT_NE(msg.find(StatePath(config_, spec_)), std::string::npos) << msg;
  EXPECT_NE(msg.find("'epochs_done'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("delete " + (dir_ / "mlp").string()), std::string::npos) << msg;
}

TEST_F(ModelProgressTest, MalformedPositionIsCorruptDataNamingTheField) {
  std::string text = kGood;
  text.replace(text.find("[2, 0]"), 6, "[2]");
  WriteState(text);
  auto p = ReadModelProgress(config_, spec_);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(p.status().message().find("'position'"), std::string::npos) << p.status().message();
}

TEST_F(ModelProgressTest, MissingFieldAndBadJsonAreCorruptData) {
  WriteState(R"({"epochs_done": 1})");
  auto p = ReadModelProgress(config_, spec_);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("'steps'"), std::string::npos) << p.status().message();
  WriteState("{not json");
  p = ReadModelProgress(config_, spec_);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("is not valid JSON"), std::string::npos);
}

TEST(MpiFrontDoorTest, RefusesRanksPerNode) {
  TrainManyConfig config;
  Options options;
  options.ranks_per_node = 1;
  Status st = CheckMpiFrontDoor(config, options);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("option 'ranks_per_node' (1) does not apply"), std::string::npos)
      << st.message();
}

TEST(MpiFrontDoorTest, RefusesGpuOnAndPlansGpuOff) {
  TrainManyConfig config;
  Options options;
  options.gpu = "on";
  Status st = CheckMpiFrontDoor(config, options);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("option 'gpu=on' does not apply"), std::string::npos)
      << st.message();
  options.gpu = "auto";
  EXPECT_TRUE(CheckMpiFrontDoor(config, options).ok());
  ModelSpec m;
  m.name = "mlp";
  m.batch_size = 32;
  m.epochs = 1;
  config.models.push_back(m);
  const MpiStream plan = PlanMpiStream(config, {ModelProgress()}, options);
  EXPECT_EQ(plan.consumers, 1);
  EXPECT_EQ(plan.options.gpu, "off");
}

TEST(MpiFrontDoorTest, RefusesRanksOnDifferentNodes) {
  EXPECT_TRUE(CheckMpiNode(0, 2).ok());
  Status st = CheckMpiNode(1, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("run both ranks on one node"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace batchcast::multimodel
