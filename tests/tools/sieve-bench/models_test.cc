// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "tools/sieve-bench/models.h"

namespace sieve::bench {
namespace {

int64_t count(const std::string& name) {
  auto model = make_model(name);
  EXPECT_TRUE(model.has_value()) << name;
  return model ? model->elements() : -1;
}

// torchvision's published parameter counts.
TEST(Models, ParameterCountsMatchTorchvision) {
  EXPECT_EQ(count("resnet18"), 11689512);
  EXPECT_EQ(count("resnet50"), 25557032);
  EXPECT_EQ(count("resnet152"), 60192808);
  EXPECT_EQ(count("vgg19"), 143667240);
  EXPECT_EQ(count("vit_b_16"), 86567656);
}

TEST(Models, EveryListedNameBuildsAndUnknownNamesDoNot) {
  for (const std::string& name : model_names()) EXPECT_TRUE(make_model(name).has_value()) << name;
  EXPECT_FALSE(make_model("resnet51").has_value());
}

TEST(Models, ResNet50OrderAndRolesFollowTorchvision) {
  const Model model = *make_model("resnet50");
  ASSERT_EQ(model.params.size(), 161u);
  EXPECT_EQ(model.params.front().name, "conv1.weight");
  EXPECT_EQ(model.params.front().role, ParamRole::ConvWeight);
  EXPECT_EQ(model.params[1].name, "bn1.weight");
  EXPECT_EQ(model.params[1].role, ParamRole::Bias);
  EXPECT_EQ(model.params[model.params.size() - 2].name, "fc.weight");
  EXPECT_EQ(model.params.back().name, "fc.bias");
  EXPECT_EQ(model.params[model.params.size() - 2].shape, (std::vector<int64_t>{1000, 2048}));
}

}  // namespace
}  // namespace sieve::bench
