// SPDX-License-Identifier: Apache-2.0
// What a mask file's JSON header costs in memory: a tree of the whole header cost
// about 70 times its size (a 40 MB header took 2.86 GB). Every allocation of this executable is
// counted (operator new is replaced here), and the peak while a header is read is compared with its size.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "compress/safetensors.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void count(void* p, bool allocated) {
  if (p == nullptr || !g_counting.load(std::memory_order_relaxed)) return;
  const int64_t bytes = static_cast<int64_t>(malloc_usable_size(p));
  const int64_t now = g_live.fetch_add(allocated ? bytes : -bytes) + (allocated ? bytes : -bytes);
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {}
}

// The peak of bytes live on the heap (through operator new) while `work` runs, above where it started.
template <typename Work> int64_t peak_heap(Work work) {
  g_live = 0;
  g_peak = 0;
  g_counting = true;
  work();
  g_counting = false;
  return g_peak.load();
}

}  // namespace

void* operator new(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (p == nullptr) throw std::bad_alloc();
  count(p, true);
  return p;
}
void operator delete(void* p) noexcept {
  count(p, false);
  std::free(p);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }

namespace sieve::compress {
namespace {

// A valid mask file whose header is about `header_bytes` long, made of tensors of one element with
// a long shape of ones: the densest JSON values a header can hold while every entry stays valid.
std::vector<uint8_t> file_of_header(size_t header_bytes, size_t* tensors) {
  std::string ones;
  for (int d = 0; d < 48; ++d) ones += d ? ",1" : "1";
  std::string header = "{";
  size_t n = 0;
  while (header.size() < header_bytes) {
    if (n) header += ',';
    header += "\"t" + std::to_string(n) + "\":{\"dtype\":\"U8\",\"shape\":[" + ones + "],\"data_offsets\":[" +
              std::to_string(n) + "," + std::to_string(n + 1) + "]}";
    ++n;
  }
  header += '}';
  std::vector<uint8_t> bytes(8 + header.size() + n, 1);
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  *tensors = n;
  return bytes;
}

TEST(SafetensorsMemory, AHeaderCostsAFewTimesItsSizeNotSeventy) {
  size_t tensors = 0;
  const std::vector<uint8_t> bytes = file_of_header(8u << 20, &tensors);
  const int64_t header = static_cast<int64_t>(bytes.size() - 8 - tensors);
  MaskFile file;
  Status status = ok_status();
  const int64_t peak = peak_heap([&] { status = masks_from_safetensors(bytes.data(), bytes.size(), &file); });
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(file.masks.size(), tensors);
  std::printf("peak %lld bytes for a %lld-byte header of %zu tensors: %.1fx\n", static_cast<long long>(peak),
              static_cast<long long>(header), tensors, static_cast<double>(peak) / static_cast<double>(header));
  // What the tensors keep (names, shapes) is a few times the header; the tree was 70 times.
  EXPECT_LT(peak, 12 * header) << "peak " << peak << " bytes for a " << header << "-byte header";
}

TEST(SafetensorsMemory, AnOversizedHeaderIsRefusedBeforeItIsRead) {
  size_t tensors = 0;
  const std::vector<uint8_t> bytes = file_of_header(kMaxSafetensorsHeader + 1024, &tensors);
  MaskFile file;
  Status status = ok_status();
  const int64_t peak = peak_heap([&] { status = masks_from_safetensors(bytes.data(), bytes.size(), &file); });
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("MiB limit of a mask file's header"), std::string::npos) << status.message();
  EXPECT_LT(peak, 64 << 10);
}

TEST(SafetensorsMemory, OneHugeEntryIsRefusedWithinItsBudget) {
  // One entry whose shape alone has a million values: refused at the entry's value budget, long
  // before a tree of it is built.
  std::string header = "{\"big\":{\"dtype\":\"U8\",\"shape\":[";
  for (int d = 0; d < 1000000; ++d) header += d ? ",1" : "1";
  header += "],\"data_offsets\":[0,1]}}";
  std::vector<uint8_t> bytes(8 + header.size() + 1, 1);
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  MaskFile file;
  Status status = ok_status();
  const int64_t peak = peak_heap([&] { status = masks_from_safetensors(bytes.data(), bytes.size(), &file); });
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("more than 4096 values"), std::string::npos) << status.message();
  EXPECT_LT(peak, 4 << 20);
}

}  // namespace
}  // namespace sieve::compress
