// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The HDF5 support shared by the dataset files and the telemetry sink (core/hdf5_util.h):
// attributes of both string forms, numbers and 1-D datasets round-trip, and failures name
// the attribute or dataset with HDF5's own reason.
#include "core/hdf5_util.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "core/hdf5_lock.h"

namespace batchcast {
namespace {

// Each test holds the HDF5 lock (lock_) and writes into a new file (file_), closed before
// the lock is given back.
class Hdf5UtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Hdf5Init();
    lock_ = std::unique_lock(Hdf5Lock());
    file_ = H5Id(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_TRUE(file_.valid()) << path_;
  }
  void TearDown() override {
    file_.Reset();
    std::remove(path_.c_str());
  }
  // One file per process and test: ctest runs this binary's tests as separate processes two
  // at a time, and HDF5 refuses to create a file another process holds open.
  const std::string path_ = ::testing::TempDir() + "/bc_hdf5_util_test." +
                            std::to_string(getpid()) + "." +
                            ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                            ".h5";
  std::unique_lock<std::mutex> lock_;
  H5Id file_;
};

TEST_F(Hdf5UtilTest, AttributesRoundTripInBothStringForms) {
  const hid_t f = file_.get();
  ASSERT_TRUE(WriteStringAttribute(f, "fixed", "hello").ok());
  ASSERT_TRUE(WriteStringAttribute(f, "empty", "").ok());
  ASSERT_TRUE(WriteStringAttribute(f, "variable", "grüße", Hdf5String::kVariable).ok());
  ASSERT_TRUE(WriteIntAttribute(f, "count", -42).ok());
  ASSERT_TRUE(WriteDoubleAttribute(f, "ratio", 0.25).ok());
  EXPECT_TRUE(HasAttribute(f, "fixed"));
  EXPECT_FALSE(HasAttribute(f, "missing"));
  EXPECT_EQ(ReadStringAttribute(f, "fixed", path_).value(), "hello");
  EXPECT_EQ(ReadStringAttribute(f, "empty", path_).value(), "");
  EXPECT_EQ(ReadStringAttribute(f, "variable", path_).value(), "grüße");
  EXPECT_EQ(ReadIntAttribute(f, "count", path_).value(), -42);
  H5Id type(H5Aget_type(H5Id(H5Aopen(f, "ratio", H5P_DEFAULT)).get()));
  EXPECT_EQ(DescribeType(type.get()), "float64");
}

TEST_F(Hdf5UtilTest, FailuresNameTheAttributeTheFileAndHdf5sReason) {
  const hid_t f = file_.get();
  ASSERT_TRUE(WriteStringAttribute(f, "name", "x").ok());
  Status twice = WriteIntAttribute(f, "name", 1);  // it exists
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.code(), StatusCode::kIoError);
  EXPECT_NE(twice.message().find("hdf5: cannot write attribute 'name': "), std::string::npos)
      << twice.message();
  auto wrong = ReadIntAttribute(f, "name", path_);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(wrong.status().message().find("attribute 'name' in " + path_ +
                                          " has type string, expected an integer"),
            std::string::npos) << wrong.status().message();
  auto missing = ReadStringAttribute(f, "missing", path_);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot open attribute 'missing' in " + path_),
            std::string::npos) << missing.status().message();
}

TEST_F(Hdf5UtilTest, Dataset1DRoundTripsAndRefusesADuplicate) {
  const hid_t f = file_.get();
  const std::vector<int64_t> values = {3, 1, 4, 1, 5};
  ASSERT_TRUE(WriteDataset1D(f, "values", H5T_STD_I64LE, H5T_NATIVE_INT64,
                             values.data(), values.size(), path_).ok());
  ASSERT_TRUE(WriteDataset1D(f, "none", H5T_STD_I64LE, H5T_NATIVE_INT64, nullptr, 0,
                             path_).ok());
  H5Id ds(H5Dopen2(f, "values", H5P_DEFAULT));
  ASSERT_TRUE(ds.valid());
  std::vector<int64_t> back(values.size());
  ASSERT_GE(H5Dread(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), 0);
  EXPECT_EQ(back, values);
  Status again = WriteDataset1D(f, "values", H5T_STD_I64LE, H5T_NATIVE_INT64,
                                values.data(), values.size(), path_);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.message().find("cannot write dataset 'values' in " + path_),
            std::string::npos) << again.message();
}

}  // namespace
}  // namespace batchcast
