// SPDX-License-Identifier: Apache-2.0
// `sieve-info masks`, driven in-process on files the test writes.
#include "tools/sieve-info/masks_command.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <sstream>

#include "tests/compress/safetensors_writer.h"

namespace {

using sieve::compress::testing::TensorSpec;

struct Outcome {
  int rc;
  std::string out, err;
};

Outcome run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int rc = sieve_info_masks(args, out, err);
  return {rc, out.str(), err.str()};
}

class MasksCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    path = ::testing::TempDir() + "sieve_info_masks_" + std::to_string(getpid()) + ".safetensors";
    std::vector<TensorSpec> t = {{"layer1.mask", "BOOL", {2, 2}, {1, 0, 0, 0}},
                                 {"layer1.bias", "F32", {1}, {0, 0, 128, 63}},
                                 {"layer2.mask", "U8", {4}, {1, 1, 1, 0}}};
    ASSERT_TRUE(sieve::compress::testing::write_file(path, sieve::compress::testing::file_bytes(t)));
  }
  void TearDown() override { std::remove(path.c_str()); }
  std::string path;
};

TEST_F(MasksCommand, TextReportsTensorsElementsKeptAndDensity) {
  Outcome r = run({path});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("layer1.mask"), std::string::npos);
  EXPECT_NE(r.out.find("layer2.mask"), std::string::npos);
  EXPECT_NE(r.out.find("skipped layer1.bias (F32"), std::string::npos);
  EXPECT_NE(r.out.find("mask tensors: 2 (1 other tensor skipped)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("total: 8 elements, 4 kept, density 0.5000"), std::string::npos) << r.out;
}

TEST_F(MasksCommand, JsonCarriesTheSameNumbers) {
  Outcome r = run({path, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.front(), '{');
  EXPECT_NE(r.out.find("\"elements\":8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"kept\":4"), std::string::npos);
  EXPECT_NE(r.out.find("\"name\":\"layer2.mask\""), std::string::npos);
  EXPECT_NE(r.out.find("\"shape\":[2,2]"), std::string::npos);
  EXPECT_NE(r.out.find("\"hash\":\"0x"), std::string::npos);
}

TEST_F(MasksCommand, ATensorThatKeepsNothingIsWarnedAbout) {
  EXPECT_EQ(run({path}).err, "") << "every tensor keeps something";
  std::vector<TensorSpec> t = {{"layer1.mask", "BOOL", {2}, {1, 0}}, {"layer2.mask", "U8", {3}, {0, 0, 0}}};
  ASSERT_TRUE(sieve::compress::testing::write_file(path, sieve::compress::testing::file_bytes(t)));
  Outcome r = run({path});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.err,
            "sieve-info masks: warning: layer2.mask keeps none of its 3 elements: published, every one of "
            "them is sent as zero (an inverted or empty mask?)\n");
}

TEST_F(MasksCommand, MalformedFilesAndBadUsageFailWithAMessage) {
  ASSERT_TRUE(sieve::compress::testing::write_file(path, {8, 0, 0, 0, 0, 0, 0, 0, '{', '"'}));
  Outcome r = run({path});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("header length"), std::string::npos) << r.err;
  EXPECT_EQ(run({}).rc, 2);
  EXPECT_EQ(run({"--bogus", path}).rc, 2);
  EXPECT_EQ(run({path, path}).rc, 2);
  EXPECT_EQ(run({"--help"}).rc, 0);
  r = run({"/nonexistent/x.safetensors"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos);
}

}  // namespace
