// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/masks_file.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include "tests/compress/safetensors_writer.h"

namespace sieve::bench {
namespace {

using compress::testing::file_bytes;
using compress::testing::TensorSpec;

Model small_model() {
  return Model{"small",
               "Small",
               {{"conv.weight", {2, 1, 1, 3}, ParamRole::ConvWeight},
                {"fc.weight", {2, 3}, ParamRole::LinearWeight},
                {"fc.bias", {2}, ParamRole::Bias}}};
}

std::string write(const std::vector<TensorSpec>& tensors) {
  const std::string path = ::testing::TempDir() + "sieve_bench_masks_" + std::to_string(getpid()) + ".safetensors";
  EXPECT_TRUE(compress::testing::write_file(path, file_bytes(tensors)));
  return path;
}

TEST(MasksFile, MasksMatchingTheModelAreUsedWithItsNames) {
  const std::string path = write({{"conv.weight_mask", "BOOL", {2, 1, 1, 3}, {1, 0, 0, 1, 1, 0}},
                                  {"fc.weight_mask", "U8", {2, 3}, {0, 0, 1, 1, 1, 1}},
                                  {"fc.bias_mask", "U8", {2}, {1, 1}}});
  MaskedModel masked;
  std::string error;
  const Model model = small_model();
  ASSERT_TRUE(load_masked_model(path, &masked, &error, &model)) << error;
  EXPECT_EQ(masked.model.display_name, "Small");
  ASSERT_EQ(masked.keep.size(), 3u);
  EXPECT_EQ(masked.keep[1], (std::vector<uint8_t>{0, 0, 1, 1, 1, 1}));
  std::remove(path.c_str());
}

// A transposed mask has the right element count and the wrong shape: refused, naming the tensor.
TEST(MasksFile, ATransposedMaskIsRefused) {
  const std::string path = write({{"conv.weight_mask", "BOOL", {2, 1, 1, 3}, {1, 0, 0, 1, 1, 0}},
                                  {"fc.weight_mask", "U8", {3, 2}, {0, 0, 1, 1, 1, 1}},
                                  {"fc.bias_mask", "U8", {2}, {1, 1}}});
  MaskedModel masked;
  std::string error;
  const Model model = small_model();
  EXPECT_FALSE(load_masked_model(path, &masked, &error, &model));
  EXPECT_NE(error.find("fc.weight_mask"), std::string::npos) << error;
  EXPECT_NE(error.find("[3, 2]"), std::string::npos) << error;
  EXPECT_NE(error.find("[2, 3]"), std::string::npos) << error;
  std::remove(path.c_str());
}

TEST(MasksFile, TooFewMasksForTheModelAreRefused) {
  const std::string path = write({{"conv.weight_mask", "BOOL", {2, 1, 1, 3}, {1, 0, 0, 1, 1, 0}}});
  MaskedModel masked;
  std::string error;
  const Model model = small_model();
  EXPECT_FALSE(load_masked_model(path, &masked, &error, &model));
  EXPECT_NE(error.find("1 mask tensor"), std::string::npos) << error;
  EXPECT_NE(error.find("3 parameters"), std::string::npos) << error;
  std::remove(path.c_str());
}

// A file whose masks hold no element describes no gradient: refused, not run as "0 bytes".
TEST(MasksFile, MasksWithoutElementsAreRefused) {
  const std::string path = write({{"empty_mask", "BOOL", {0}, {}}});
  MaskedModel masked;
  std::string error;
  EXPECT_FALSE(load_masked_model(path, &masked, &error, nullptr));
  EXPECT_NE(error.find("hold no elements"), std::string::npos) << error;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sieve::bench
