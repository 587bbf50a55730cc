// SPDX-License-Identifier: Apache-2.0
// Gradient layouts of well-known models, generated from their published architectures (the
// torchvision definitions), in the order PyTorch's named_parameters() yields them. sieve-bench needs
// only shapes: the traffic of a data-parallel all-reduce depends on sizes, order and pruning alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sieve::bench {

enum class ParamRole {
  ConvWeight,    // [out, in, kh, kw]: prunable; channel pruning removes whole output filters
  LinearWeight,  // [out, in]: prunable; channel pruning removes whole output rows
  Bias,          // biases, norm scales and shifts, tokens, embeddings: never pruned
};

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  ParamRole role;
  int64_t elements() const;
  bool prunable() const { return role != ParamRole::Bias; }
};

struct Model {
  std::string name;          // as the user types it: resnet18, resnet50, resnet152, vgg19, vit_b_16
  std::string display_name;  // as a human reads it: ResNet-50
  std::vector<Param> params;
  int64_t elements() const;
};

// The models sieve-bench knows, by command-line name.
std::vector<std::string> model_names();
std::optional<Model> make_model(const std::string& name);

}  // namespace sieve::bench
