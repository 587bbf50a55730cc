// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-bench/fsdp_layout.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

namespace sieve::bench {

size_t ShardedParam::real_rows(int rank) const {
  const size_t first = chunk_rows * static_cast<size_t>(rank);
  return first >= rows ? 0 : std::min(chunk_rows, rows - first);
}

namespace {

bool all_digits(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// "encoder_layer_7": a list entry named by its index.
bool numbered(const std::string& component) {
  const size_t underscore = component.rfind('_');
  return all_digits(component) ||
         (underscore != std::string::npos && underscore > 0 && all_digits(component.substr(underscore + 1)));
}

}  // namespace

std::string fsdp_unit_of(const std::string& parameter_name) {
  size_t begin = 0;
  while (true) {
    const size_t dot = parameter_name.find('.', begin);
    if (dot == std::string::npos) return "";  // what is left names the tensor
    if (numbered(parameter_name.substr(begin, dot - begin))) return parameter_name.substr(0, dot);
    begin = dot + 1;
  }
}

std::vector<FsdpGroup> fsdp_groups(const Model& model, int nranks) {
  const size_t n = static_cast<size_t>(std::max(1, nranks));
  std::vector<FsdpGroup> groups(1);  // the root, first
  std::map<std::string, size_t> index_of{{"", 0}};
  for (size_t i = 0; i < model.params.size(); ++i) {
    const Param& param = model.params[i];
    const std::string unit = fsdp_unit_of(param.name);
    auto [at, added] = index_of.emplace(unit, groups.size());
    if (added) groups.push_back(FsdpGroup{unit, {}, 0});
    FsdpGroup& group = groups[at->second];
    ShardedParam piece;
    piece.param = i;
    piece.rows = param.shape.empty() ? 1 : static_cast<size_t>(param.shape[0]);
    piece.row_elements = piece.rows == 0 ? 0 : static_cast<size_t>(param.elements()) / piece.rows;
    piece.chunk_rows = (piece.rows + n - 1) / n;
    piece.offset = group.shard_elements;
    group.shard_elements += piece.piece_elements();
    group.params.push_back(piece);
  }
  groups.erase(std::remove_if(groups.begin(), groups.end(), [](const FsdpGroup& g) { return g.shard_elements == 0; }),
               groups.end());
  return groups;
}

std::vector<uint8_t> fsdp_buffer_mask(const FsdpGroup& group, int nranks,
                                      const std::vector<std::vector<uint8_t>>* keep) {
  std::vector<uint8_t> mask(group.buffer_elements(nranks), 0);  // padding stays 0
  for (int rank = 0; rank < nranks; ++rank) {
    uint8_t* shard = mask.data() + group.shard_elements * static_cast<size_t>(rank);
    for (const ShardedParam& piece : group.params) {
      const size_t first = piece.chunk_rows * static_cast<size_t>(rank) * piece.row_elements;
      const size_t count = piece.real_rows(rank) * piece.row_elements;
      if (keep == nullptr) std::memset(shard + piece.offset, 1, count);
      else std::memcpy(shard + piece.offset, (*keep)[piece.param].data() + first, count);
    }
  }
  return mask;
}

ShardCompaction shard_compaction(const std::vector<uint8_t>& buffer_mask, int nranks, const ProxyRules& rules) {
  ShardCompaction result;
  const size_t count = buffer_mask.size(), n = static_cast<size_t>(std::max(1, nranks));
  if (n < 2 || count % n != 0) return result;
  const size_t shard = count / n;
  for (size_t s = 0; s < n; ++s) {
    result.kept.push_back(static_cast<size_t>(std::count(buffer_mask.begin() + static_cast<long>(s * shard),
                                                         buffer_mask.begin() + static_cast<long>((s + 1) * shard), 1)));
  }
  result.width = *std::max_element(result.kept.begin(), result.kept.end());
  // The proxy's rule (entry_plan.cc): compaction pays when it sends at most max_density of the
  // buffer, strictly less than all of it, and the buffer is not tiny.
  const size_t sent = n * result.width;
  result.compacts = result.width > 0 && count >= rules.min_count && sent < count &&
                    static_cast<double>(sent) <= rules.max_density * static_cast<double>(count);
  return result;
}

}  // namespace sieve::bench
