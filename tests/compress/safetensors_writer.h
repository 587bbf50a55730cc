// SPDX-License-Identifier: Apache-2.0
// Test helper: writes small safetensors files (header JSON + data), well-formed or deliberately not.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace sieve::compress::testing {

struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;
};

inline std::string header_json(const std::vector<TensorSpec>& tensors, const std::string& metadata = "") {
  std::string json = "{";
  if (!metadata.empty()) json += "\"__metadata__\":" + metadata + ",";
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    json += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) json += (d ? "," : "") + std::to_string(t.shape[d]);
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.data.size()) + "]}";
    if (i + 1 < tensors.size()) json += ",";
    offset += t.data.size();
  }
  return json + "}";
}

// The whole file: header length, header (padded with spaces to 8 bytes, as the reference writer
// does), data in the order given.
inline std::vector<uint8_t> file_bytes(const std::string& header, const std::vector<TensorSpec>& tensors) {
  std::string padded = header;
  while (padded.size() % 8) padded += ' ';
  size_t total = 8 + padded.size();
  for (const TensorSpec& t : tensors) total += t.data.size();
  std::vector<uint8_t> out(total);
  const uint64_t n = padded.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, padded.data(), padded.size());
  size_t at = 8 + padded.size();
  for (const TensorSpec& t : tensors) {
    if (!t.data.empty()) std::memcpy(out.data() + at, t.data.data(), t.data.size());
    at += t.data.size();
  }
  return out;
}

inline std::vector<uint8_t> file_bytes(const std::vector<TensorSpec>& tensors) {
  return file_bytes(header_json(tensors), tensors);
}

inline bool write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace sieve::compress::testing
