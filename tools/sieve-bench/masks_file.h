// SPDX-License-Identifier: Apache-2.0
// --masks FILE.safetensors: the user's own model, described by its pruning masks. Every BOOL/U8
// tensor of the file is one parameter (name, shape, kept elements), in the file's data order —
// the order torch.save / safetensors' save_file write a state dict in, i.e. registration order.
#pragma once

#include <string>
#include <vector>

#include "tools/sieve-bench/buckets.h"
#include "tools/sieve-bench/models.h"
#include "tools/sieve-bench/pruning.h"

namespace sieve::bench {

struct MaskedModel {
  Model model;
  std::vector<std::vector<uint8_t>> keep;  // per parameter, one byte per element
};

// False with *error naming the problem when the file cannot be used. With `model` (--model given
// too) the file must hold one mask per parameter of that model, in its order and of its shapes (a
// transposed mask has the right size and the wrong shape), and the model's names are kept.
bool load_masked_model(const std::string& path, MaskedModel* out, std::string* error, const Model* model = nullptr);

// Lays per-parameter masks out like the buckets.
std::vector<BucketMask> bucket_masks(const std::vector<Bucket>& buckets, const std::vector<std::vector<uint8_t>>& keep);

}  // namespace sieve::bench
