// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/masks_file.h"

#include <cstring>

#include "compress/safetensors.h"

namespace sieve::bench {

std::vector<BucketMask> bucket_masks(const std::vector<Bucket>& buckets,
                                     const std::vector<std::vector<uint8_t>>& keep) {
  std::vector<BucketMask> masks;
  for (const Bucket& bucket : buckets) {
    BucketMask mask(bucket.elements);
    for (const BucketSpan& span : bucket.spans)
      std::memcpy(mask.data() + span.offset, keep[span.param].data(), span.count);
    masks.push_back(std::move(mask));
  }
  return masks;
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

bool load_masked_model(const std::string& path, MaskedModel* out, std::string* error, const Model* model) {
  compress::MaskFile file;
  const compress::Status status = compress::load_mask_file(path, &file);
  if (!status.ok()) {
    *error = "--masks: " + status.message();  // the message names the file already
    return false;
  }
  if (file.masks.empty()) {
    *error = path + ": no BOOL or U8 mask tensors in the file";
    return false;
  }
  if (file.combined.count() == 0) {
    *error = "--masks: " + path + ": its mask tensors hold no elements: there is nothing to all-reduce";
    return false;
  }
  std::string stem = path.substr(path.find_last_of('/') + 1);
  stem = stem.substr(0, stem.find('.'));
  out->model = Model{stem, stem, {}};
  out->keep.clear();
  for (const compress::MaskTensor& tensor : file.masks) {
    Param param{tensor.name, {}, ParamRole::Bias};
    for (uint64_t d : tensor.shape) param.shape.push_back(static_cast<int64_t>(d));
    if (param.shape.size() >= 2) param.role = param.shape.size() == 2 ? ParamRole::LinearWeight : ParamRole::ConvWeight;
    if (param.shape.empty()) param.shape.push_back(static_cast<int64_t>(tensor.elements));
    std::vector<uint8_t> keep(tensor.elements);
    for (uint64_t i = 0; i < tensor.elements; ++i) keep[i] = file.combined.test(tensor.first + i) ? 1 : 0;
    out->model.params.push_back(std::move(param));
    out->keep.push_back(std::move(keep));
  }
  if (model == nullptr) return true;
  const std::vector<Param>& from_file = out->model.params;
  if (from_file.size() != model->params.size()) {
    *error = "--masks: " + path + " has " + std::to_string(from_file.size()) + " mask tensor" +
             (from_file.size() == 1 ? "" : "s") + ", --model " + model->name + " has " +
             std::to_string(model->params.size()) + " parameters (one mask per parameter, in their order)";
    return false;
  }
  for (size_t i = 0; i < from_file.size(); ++i) {
    const Param& expected = model->params[i];
    if (from_file[i].shape != expected.shape) {
      *error = "--masks: " + path + ": tensor \"" + from_file[i].name + "\" has shape " +
               shape_text(from_file[i].shape) + ", but parameter " + std::to_string(i) + " of " + model->name + " (" +
               expected.name + ") is " + shape_text(expected.shape);
      return false;
    }
  }
  out->model = *model;
  return true;
}

}  // namespace sieve::bench
