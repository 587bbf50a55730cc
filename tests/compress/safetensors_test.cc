// SPDX-License-Identifier: Apache-2.0
#include "compress/safetensors.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include "compress/json.h"
#include "tests/compress/safetensors_writer.h"

namespace sieve::compress {
namespace {

using testing::file_bytes;
using testing::header_json;
using testing::TensorSpec;

std::vector<TensorSpec> sample() {
  return {{"conv1.weight_mask", "BOOL", {2, 3}, {1, 0, 1, 1, 0, 0}},
          {"fc.bias", "F32", {2}, std::vector<uint8_t>(8, 0x3f)},
          {"fc.weight_mask", "U8", {4}, {0, 7, 0, 255}}};
}

Status parse_masks(const std::vector<uint8_t>& bytes, MaskFile* out) {
  return masks_from_safetensors(bytes.data(), bytes.size(), out);
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  MaskFile f;
  Status s = parse_masks(bytes, &f);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kMalformed);
  return s.message();
}

TEST(Safetensors, MasksAreConcatenatedInDataOffsetOrder) {
  auto tensors = sample();
  MaskFile f;
  ASSERT_TRUE(parse_masks(file_bytes(tensors), &f).ok());
  ASSERT_EQ(f.masks.size(), 2u);
  EXPECT_EQ(f.masks[0].name, "conv1.weight_mask");
  EXPECT_EQ(f.masks[0].kept, 3u);
  EXPECT_EQ(f.masks[1].first, 6u);
  EXPECT_EQ(f.masks[1].kept, 2u);
  ASSERT_EQ(f.skipped.size(), 1u);
  EXPECT_EQ(f.skipped[0].name, "fc.bias");
  EXPECT_EQ(f.combined.count(), 10u);
  const bool expect[] = {1, 0, 1, 1, 0, 0, 0, 1, 0, 1};
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(f.combined.test(i), expect[i]) << i;

  // The JSON order does not matter, the data offsets do.
  std::string header =
      "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
      "\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
  std::vector<TensorSpec> data = {{"a", "U8", {2}, {1, 0}}, {"b", "U8", {2}, {0, 1}}};
  ASSERT_TRUE(parse_masks(file_bytes(header, data), &f).ok());
  ASSERT_EQ(f.masks.size(), 2u);
  EXPECT_EQ(f.masks[0].name, "a");
  EXPECT_TRUE(f.combined.test(0) && !f.combined.test(1) && !f.combined.test(2) && f.combined.test(3));
}

TEST(Safetensors, ScalarsAndEmptyTensorsAreFine) {
  std::vector<TensorSpec> t = {{"scalar", "U8", {}, {1}}, {"empty", "BOOL", {0, 5}, {}}};
  MaskFile f;
  ASSERT_TRUE(parse_masks(file_bytes(t), &f).ok());
  EXPECT_EQ(f.combined.count(), 1u);
}

TEST(Safetensors, MalformedFilesAreRefusedWithTheReason) {
  EXPECT_NE(error_of({1, 2, 3}).find("too short"), std::string::npos);
  auto bytes = file_bytes(sample());
  bytes[0] = 0xFF;  // header length far past the file
  EXPECT_NE(error_of(bytes).find("header length"), std::string::npos);
  bytes = file_bytes(sample());
  const uint64_t over = kMaxSafetensorsHeader + 1;
  std::memcpy(bytes.data(), &over, 8);
  EXPECT_NE(error_of(bytes).find("not a safetensors file"), std::string::npos);
  // A header length within the file but over the limit names the limit.
  std::vector<uint8_t> big(8 + over, ' ');
  std::memcpy(big.data(), &over, 8);
  big[8] = '{';
  EXPECT_NE(error_of(big).find("MiB limit"), std::string::npos);

  auto with_header = [](const std::string& h, std::vector<TensorSpec> t) { return error_of(file_bytes(h, t)); };
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}", {{"a", "U8", {2}, {1, 1}}})
                .find("bad JSON at offset"),
            std::string::npos);
  EXPECT_NE(with_header("[1]", {}).find("JSON object"), std::string::npos);
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,2]}}", {{"a", "U8", {2}, {1, 1}}})
                .find("need 3 bytes"),
            std::string::npos);
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,2]}}", {{"a", "U8", {2}, {1, 1}}})
                .find("unsupported dtype"),
            std::string::npos);
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", {{"a", "U8", {2}, {1, 1}}})
                .find("past the"),
            std::string::npos);
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}",
                        {{"a", "U8", {3}, {1, 1, 1}}})
                .find("overlaps"),
            std::string::npos);
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", {{"a", "U8", {2}, {1, 1}}})
                .find("gap"),
            std::string::npos);
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", {{"a", "U8", {2}, {1, 1}}})
                .find("no tensor describes"),
            std::string::npos);
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", {{"a", "U8", {1}, {1}}})
                .find("non-negative"),
            std::string::npos);
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                        "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                        {{"a", "U8", {2}, {1, 1}}})
                .find("duplicate key"),
            std::string::npos);
  EXPECT_NE(
      with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", {{"a", "U8", {1}, {1}}})
          .find("unknown key"),
      std::string::npos);
  EXPECT_NE(
      with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", {{"w", "F32", {1}, {0, 0, 0, 0}}})
          .find("no BOOL or U8"),
      std::string::npos);
  EXPECT_NE(with_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[18446744073709551615,2],\"data_offsets\":[0,1]}}",
                        {{"a", "U8", {1}, {1}}})
                .find("overflows"),
            std::string::npos);
}

// Files of another format are named as such, not by the number their first 8 bytes happen to make.
TEST(Safetensors, OtherFormatsAreNotSafetensorsFiles) {
  const std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<topology version=\"2.0\"></topology>\n";
  const std::string message = error_of(std::vector<uint8_t>(xml.begin(), xml.end()));
  EXPECT_NE(message.find("not a safetensors file"), std::string::npos) << message;
  EXPECT_EQ(message.find("749118580988207463"), std::string::npos) << message;
  // A plausible length whose header is not JSON is another format too.
  std::vector<uint8_t> bytes(8 + 16, 'x');
  bytes[0] = 16;
  for (int i = 1; i < 8; ++i) bytes[i] = 0;
  EXPECT_NE(error_of(bytes).find("not a safetensors file"), std::string::npos);
}

TEST(Safetensors, ADirectoryIsReportedAsADirectory) {
  MaskFile f;
  const Status s = load_mask_file(::testing::TempDir(), &f);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("is a directory"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("9223372036854775807"), std::string::npos) << s.message();
}

TEST(Safetensors, LoadMaskFileReadsFromDiskAndNamesThePath) {
  const std::string path = ::testing::TempDir() + "sieve_mask_" + std::to_string(getpid()) + ".safetensors";
  ASSERT_TRUE(testing::write_file(path, file_bytes(sample())));
  MaskFile f;
  ASSERT_TRUE(load_mask_file(path, &f).ok());
  EXPECT_EQ(f.combined.kept(), 5u);
  EXPECT_EQ(load_mask_file(path, &f, 10).code(), Code::kInvalidArgument);
  ASSERT_TRUE(testing::write_file(path, {1, 2, 3}));
  Status s = load_mask_file(path, &f);
  EXPECT_NE(s.message().find(path), std::string::npos);
  std::remove(path.c_str());
  EXPECT_EQ(load_mask_file(path, &f).code(), Code::kIo);
}

// Read whole, so bounded: a FIFO (whose blocking open would stall the caller forever), a device and
// a sparse file beyond the limit (nothing read or allocated) are refused with the reason.
TEST(Safetensors, SpecialAndOversizedFilesAreRefusedUnread) {
  MaskFile f;
  const std::string fifo = ::testing::TempDir() + "sieve_mask_fifo_" + std::to_string(getpid());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Status s = load_mask_file(fifo, &f);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();
  std::remove(fifo.c_str());
  s = load_mask_file("/dev/zero", &f);
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();

  EXPECT_LE(default_mask_file_limit(), uint64_t{16} << 30);
  const std::string huge = ::testing::TempDir() + "sieve_mask_huge_" + std::to_string(getpid()) + ".safetensors";
  ASSERT_TRUE(testing::write_file(huge, {1, 2, 3}));
  ASSERT_EQ(::truncate(huge.c_str(), static_cast<off_t>(default_mask_file_limit() + 1)), 0);
  s = load_mask_file(huge, &f);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("-byte limit"), std::string::npos) << s.message();
  std::remove(huge.c_str());
}

TEST(Json, StrictGrammarWithOffsets) {
  json::Value v;
  const std::string text = " {\"k\": [1, -2.5e3, true, false, null, \"\\u00e9\\ud83d\\ude00\\n\"]} ";
  ASSERT_TRUE(json::parse(text.data(), text.size(), &v).ok());
  ASSERT_EQ(v.members.size(), 1u);
  const json::Value& a = v.members[0].second;
  ASSERT_EQ(a.items.size(), 6u);
  uint64_t n = 0;
  EXPECT_TRUE(a.items[0].as_uint64(&n));
  EXPECT_EQ(n, 1u);
  EXPECT_FALSE(a.items[1].as_uint64(&n));
  EXPECT_EQ(a.items[5].text, "\xc3\xa9\xf0\x9f\x98\x80\n");
  for (const char* bad :
       {"{", "[1,]", "{\"a\" 1}", "01", "1.", "\"\\x\"", "\"\\ud800\"", "tru", "[1] 2", "\"a\nb\"", "{\"a\":1,}"}) {
    Status s = json::parse(bad, std::strlen(bad), &v);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("offset"), std::string::npos) << bad;
  }
  std::string deep(200, '[');
  deep += std::string(200, ']');
  EXPECT_NE(json::parse(deep.data(), deep.size(), &v).message().find("nesting"), std::string::npos);
  const std::string big = "18446744073709551616";
  ASSERT_TRUE(json::parse(big.data(), big.size(), &v).ok());
  EXPECT_FALSE(v.as_uint64(&n));  // 2^64 does not fit
}

}  // namespace
}  // namespace sieve::compress
