// SPDX-License-Identifier: Apache-2.0
#include "tools/common/json_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

namespace sieve::tools {
namespace {

std::string written(double number) {
  std::ostringstream out;
  JsonWriter json(out);
  json.value(number);
  return out.str();
}

TEST(JsonWriter, IntegralNumbersAreWrittenAsIntegers) {
  EXPECT_EQ(written(519406123.0), "519406123");
  EXPECT_EQ(written(0.0), "0");
  EXPECT_EQ(written(-4096.0), "-4096");
  EXPECT_EQ(written(9007199254740992.0), "9007199254740992");  // 2^53, the last exact integer
}

TEST(JsonWriter, FractionsUseTheFewestDigitsThatReadBackExactly) {
  EXPECT_EQ(written(0.1), "0.1");
  EXPECT_EQ(written(0.25), "0.25");
  for (double x : {1.0 / 3.0, 2.0 / 3.0, 1e-300, 6.02214076e23, 1e300, 0.30000000000000004}) {
    const std::string text = written(x);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), x) << text;
  }
}

// The GPU kit's records: one object a line, measurements to their precision rather than every digit.
TEST(JsonWriter, JsonLineIsOneObjectOnItsOwnLine) {
  const std::string line = json_line([](JsonWriter& json) {
    json.member("bytes", uint64_t(4096));
    json.member("time_us", rounded(123.456789, 1));
    json.member("busbw_GBps", rounded(2.0 / 3.0, 3));
    json.member("correct", true);
    json.member("net", "Sieve \"ib\"\n");
  });
  EXPECT_EQ(
      line,
      "{\"bytes\":4096,\"time_us\":123.5,\"busbw_GBps\":0.667,\"correct\":true,\"net\":\"Sieve \\\"ib\\\"\\n\"}\n");
}

TEST(JsonWriter, RoundedKeepsTheGivenDecimals) {
  EXPECT_EQ(written(rounded(0.12345, 4)), "0.1235");
  EXPECT_EQ(written(rounded(1.15 * 0.3, 4)), "0.345");
  EXPECT_EQ(written(rounded(519406123.4, 0)), "519406123");
  EXPECT_EQ(written(rounded(-2.25, 1)), "-2.3");  // half away from zero, as std::round
}

TEST(JsonWriter, NonFiniteNumbersAreNull) {
  EXPECT_EQ(written(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(written(std::numeric_limits<double>::infinity()), "null");
}

TEST(JsonWriter, PlacesCommasAndEscapes) {
  std::ostringstream out;
  JsonWriter json(out);
  json.begin_object();
  json.member("a", 1);
  json.member("b\"", "x\ny");
  json.key("c");
  json.begin_array();
  json.value(true);
  json.null();
  json.end_array();
  json.end_object();
  EXPECT_EQ(out.str(), "{\"a\":1,\"b\\\"\":\"x\\ny\",\"c\":[true,null]}");
}

}  // namespace
}  // namespace sieve::tools
