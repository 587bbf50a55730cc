// SPDX-License-Identifier: Apache-2.0
#include "tools/common/json_fields.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tools/common/json_writer.h"

namespace sieve::tools {
namespace {

using json_fields::Value;

// A report as a bench script writes one, by the project's writer: the oracle is what went in.
struct Report {
  std::vector<double> seconds;
  std::string error;
  double density = 0;
};

std::string written(const Report& report) {
  std::ostringstream out;
  JsonWriter json(out);
  json.begin_object();
  json.key("error");
  json.value(report.error);
  json.key("seconds");
  json.begin_array();
  for (double s : report.seconds) json.value(s);
  json.end_array();
  json.key("density");
  json.value(report.density);
  json.end_object();
  return out.str();
}

TEST(JsonFields, RandomReportsAfterLogLinesReadBackExactly) {
  std::mt19937_64 random(7);
  const std::string alphabet = "ab\"\\{}[]:,\n\t \xc3\xa9";
  for (int trial = 0; trial < 500; ++trial) {
    Report report;
    report.seconds.resize(random() % 6);
    for (double& s : report.seconds) s = std::ldexp(double(random() % 100000), -int(random() % 20));
    for (size_t n = random() % 24; n > 0; --n) report.error += alphabet[random() % alphabet.size()];
    report.density = double(random() % 1000) / 1000;
    // Logs before the report, some with braces, one with the keys themselves in it.
    const std::string text =
        "loading {model}\n{\"seconds\":[9,9]} is what an old run said {\n" + written(report) + "\n";
    Value parsed;
    ASSERT_TRUE(json_fields::last_object_line(text, &parsed)) << text;
    EXPECT_EQ(json_fields::numbers(parsed, "seconds"), report.seconds) << text;
    EXPECT_EQ(json_fields::string(parsed, "error"), report.error) << text;
    EXPECT_EQ(json_fields::number_or(parsed, "density", -1), report.density) << text;
  }
}

TEST(JsonFields, AbsentOrMistypedMembersGiveTheFallback) {
  Value parsed;
  ASSERT_TRUE(json_fields::last_object_line("{\"seconds\":\"soon\",\"n\":[1]}", &parsed));
  double out = 5;
  EXPECT_FALSE(json_fields::number(parsed, "seconds", &out));
  EXPECT_FALSE(json_fields::number(parsed, "n", &out));
  EXPECT_EQ(out, 5);
  EXPECT_EQ(json_fields::number_or(parsed, "missing", -1), -1);
  EXPECT_TRUE(json_fields::numbers(parsed, "seconds").empty());
  EXPECT_EQ(json_fields::string(parsed, "n"), "");
  EXPECT_FALSE(json_fields::last_object_line("no report\n{broken\n", &parsed));
  EXPECT_FALSE(json_fields::last_object_line("", &parsed));
}

TEST(JsonFields, AMemberIsFoundAnywhereInDocumentOrder) {
  // iperf3 -J's shape: the totals sit under "end", after intervals that carry other sums.
  const std::string iperf =
      "{\n \"intervals\": [{\"sum\": {\"bytes\": 1}}],\n \"end\": {\n"
      "  \"sum_sent\": {\"bytes\": 2},\n  \"sum_received\": {\"bytes\": 3, \"bits_per_second\": 4.5}\n"
      " }\n}\n";
  Value report;
  ASSERT_TRUE(json_fields::whole(iperf, &report));
  const Value* received = json_fields::find_anywhere(report, "sum_received");
  ASSERT_NE(received, nullptr);
  EXPECT_EQ(json_fields::number_or(*received, "bytes", -1), 3);
  EXPECT_EQ(json_fields::number_or(*received, "bits_per_second", -1), 4.5);
  EXPECT_EQ(json_fields::find_anywhere(report, "nowhere"), nullptr);
  EXPECT_FALSE(json_fields::whole("{\"a\":1} trailing", &report));
}

}  // namespace
}  // namespace sieve::tools
