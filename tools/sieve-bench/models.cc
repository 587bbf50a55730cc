// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/models.h"

#include <functional>

namespace sieve::bench {

int64_t Param::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Model::elements() const {
  int64_t n = 0;
  for (const Param& p : params) n += p.elements();
  return n;
}

namespace {

class Builder {
 public:
  explicit Builder(Model& model) : model_(model) {}
  void conv(const std::string& name, int64_t out, int64_t in, int64_t k, bool bias = false) {
    model_.params.push_back({name + ".weight", {out, in, k, k}, ParamRole::ConvWeight});
    if (bias) model_.params.push_back({name + ".bias", {out}, ParamRole::Bias});
  }
  void linear(const std::string& name, int64_t out, int64_t in) {
    linear_named(name + ".weight", name + ".bias", out, in);
  }
  void linear_named(const std::string& weight, const std::string& bias, int64_t out, int64_t in) {
    model_.params.push_back({weight, {out, in}, ParamRole::LinearWeight});
    model_.params.push_back({bias, {out}, ParamRole::Bias});
  }
  // BatchNorm and LayerNorm both carry a scale and a shift per channel.
  void norm(const std::string& name, int64_t channels) {
    model_.params.push_back({name + ".weight", {channels}, ParamRole::Bias});
    model_.params.push_back({name + ".bias", {channels}, ParamRole::Bias});
  }
  void tensor(const std::string& name, std::vector<int64_t> shape) {
    model_.params.push_back({name, std::move(shape), ParamRole::Bias});
  }

 private:
  Model& model_;
};

// torchvision's ResNet: BasicBlock (expansion 1) or Bottleneck (expansion 4, stride on the 3x3).
Model resnet(const std::string& name, const std::string& display, bool bottleneck, std::vector<int> blocks) {
  Model model{name, display, {}};
  Builder b(model);
  b.conv("conv1", 64, 3, 7);
  b.norm("bn1", 64);
  const int64_t expansion = bottleneck ? 4 : 1;
  int64_t in = 64;
  for (size_t layer = 0; layer < blocks.size(); ++layer) {
    const int64_t width = 64 << layer;
    const int stride = layer == 0 ? 1 : 2;
    for (int block = 0; block < blocks[layer]; ++block) {
      const std::string prefix = "layer" + std::to_string(layer + 1) + "." + std::to_string(block);
      const int64_t out = width * expansion;
      if (bottleneck) {
        b.conv(prefix + ".conv1", width, in, 1);
        b.norm(prefix + ".bn1", width);
        b.conv(prefix + ".conv2", width, width, 3);
        b.norm(prefix + ".bn2", width);
        b.conv(prefix + ".conv3", out, width, 1);
        b.norm(prefix + ".bn3", out);
      } else {
        b.conv(prefix + ".conv1", width, in, 3);
        b.norm(prefix + ".bn1", width);
        b.conv(prefix + ".conv2", width, width, 3);
        b.norm(prefix + ".bn2", width);
      }
      if (block == 0 && (stride != 1 || in != out)) {
        b.conv(prefix + ".downsample.0", out, in, 1);
        b.norm(prefix + ".downsample.1", out);
      }
      in = out;
    }
  }
  b.linear("fc", 1000, in);
  return model;
}

// torchvision's VGG19 (configuration "E", no batch norm): 16 convolutions with bias, 3 linear layers.
Model vgg19() {
  Model model{"vgg19", "VGG19", {}};
  Builder b(model);
  const int widths[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0};
  int64_t in = 3;
  int index = 0;
  for (int width : widths) {
    if (width != 0) {  // 0 is a max-pool: no parameters, but it takes an index in features
      b.conv("features." + std::to_string(index), width, in, 3, /*bias=*/true);
      in = width;
      index += 2;  // Conv2d then ReLU
    } else {
      index += 1;
    }
  }
  b.linear("classifier.0", 4096, 512 * 7 * 7);
  b.linear("classifier.3", 4096, 4096);
  b.linear("classifier.6", 1000, 4096);
  return model;
}

// torchvision's ViT-B/16: 224x224 images, 16x16 patches, 12 layers, hidden 768, MLP 3072.
Model vit_b_16() {
  Model model{"vit_b_16", "ViT-B/16", {}};
  Builder b(model);
  const int64_t hidden = 768, mlp = 3072, layers = 12, patches = (224 / 16) * (224 / 16);
  b.tensor("class_token", {1, 1, hidden});  // a module's own parameters come before its children's
  b.conv("conv_proj", hidden, 3, 16, /*bias=*/true);
  b.tensor("encoder.pos_embedding", {1, patches + 1, hidden});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string prefix = "encoder.layers.encoder_layer_" + std::to_string(i);
    b.norm(prefix + ".ln_1", hidden);
    b.linear_named(prefix + ".self_attention.in_proj_weight", prefix + ".self_attention.in_proj_bias", 3 * hidden,
                   hidden);
    b.linear(prefix + ".self_attention.out_proj", hidden, hidden);
    b.norm(prefix + ".ln_2", hidden);
    b.linear(prefix + ".mlp.0", mlp, hidden);
    b.linear(prefix + ".mlp.3", hidden, mlp);
  }
  b.norm("encoder.ln", hidden);
  b.linear("heads.head", 1000, hidden);
  return model;
}

}  // namespace

std::vector<std::string> model_names() { return {"resnet18", "resnet50", "resnet152", "vgg19", "vit_b_16"}; }

std::optional<Model> make_model(const std::string& name) {
  if (name == "resnet18") return resnet(name, "ResNet-18", false, {2, 2, 2, 2});
  if (name == "resnet50") return resnet(name, "ResNet-50", true, {3, 4, 6, 3});
  if (name == "resnet152") return resnet(name, "ResNet-152", true, {3, 8, 36, 3});
  if (name == "vgg19") return vgg19();
  if (name == "vit_b_16") return vit_b_16();
  return std::nullopt;
}

}  // namespace sieve::bench
