#include "plugin/config.h"

#include <gtest/gtest.h>

namespace sieve::config {
namespace {

const Effective& find(const Registry& r, const std::string& name) {
  for (const auto& e : r.effective())
    if (name == e.info->name) return e;
  throw std::runtime_error("no such parameter " + name);
}

bool mentions(const Registry& r, const std::string& text) {
  for (const auto& d : r.diagnostics())
    if (d.find(text) != std::string::npos) return true;
  return false;
}

TEST(Config, EveryDefaultParses) {
  Registry r({});
  EXPECT_TRUE(r.diagnostics().empty()) << r.diagnostics().front();
  EXPECT_EQ(r.effective().size(), params().size());
  for (const auto& e : r.effective()) EXPECT_EQ(e.source, Source::Default) << e.info->name;
}

TEST(Config, EveryParamIsDocumentedAndNamedSieve) {
  for (const auto& p : params()) {
    EXPECT_EQ(std::string(p.name).rfind("SIEVE_", 0), 0u) << p.name;
    EXPECT_GT(std::string(p.doc).size(), 10u) << p.name;
    if (p.kind == Kind::Choice) {
      EXPECT_NE(std::string(p.choices).find('|'), std::string::npos) << p.name;
    }
  }
}

TEST(Config, EnvironmentOverridesDefaultWithType) {
  Registry r({{"SIEVE_NSOCKS", "8"}, {"SIEVE_CHUNK_SIZE", "1M"}, {"SIEVE_SOCKET_FAMILY", "IPv6"}});
  EXPECT_EQ(r.settings().nsocks, 8);
  EXPECT_EQ(r.settings().chunk_size, 1u << 20);
  EXPECT_EQ(r.settings().socket_family, "ipv6");
  EXPECT_EQ(find(r, "SIEVE_NSOCKS").source, Source::Environment);
  EXPECT_TRUE(r.diagnostics().empty());
}

TEST(Config, BadValueKeepsDefaultAndSaysWhy) {
  Registry r({{"SIEVE_NSOCKS", "many"}, {"SIEVE_SOCKET_FAMILY", "ipx"}});
  EXPECT_EQ(r.settings().nsocks, 0);  // auto
  EXPECT_EQ(r.settings().socket_family, "any");
  ASSERT_EQ(r.diagnostics().size(), 2u);
  EXPECT_TRUE(mentions(r, "SIEVE_NSOCKS='many' is not a valid int"));
  EXPECT_TRUE(mentions(r, "SIEVE_SOCKET_FAMILY='ipx' is not a valid one of any|ipv4|ipv6"));
}

TEST(Config, UnknownVariableSuggestsClosestName) {
  Registry r({{"SIEVE_NSOCK", "2"}, {"SIEVE_TOTALLY_UNRELATED_THING", "1"}});
  ASSERT_EQ(r.diagnostics().size(), 2u);
  EXPECT_NE(r.diagnostics()[0].find("did you mean SIEVE_NSOCKS?"), std::string::npos) << r.diagnostics()[0];
  EXPECT_EQ(r.diagnostics()[1].find("did you mean"), std::string::npos) << r.diagnostics()[1];
  EXPECT_EQ(r.settings().nsocks, 0);
}

TEST(Config, Parsers) {
  bool b = false;
  EXPECT_TRUE(parse_bool(" On ", b));
  EXPECT_TRUE(b);
  EXPECT_FALSE(parse_bool("2", b));
  int64_t i = 0;
  EXPECT_TRUE(parse_int("-12", i));
  EXPECT_EQ(i, -12);
  EXPECT_FALSE(parse_int("12x", i));
  EXPECT_FALSE(parse_int("", i));
  uint64_t s = 0;
  EXPECT_TRUE(parse_size("64KiB", s));
  EXPECT_EQ(s, 64u << 10);
  EXPECT_TRUE(parse_size("3g", s));
  EXPECT_EQ(s, 3ull << 30);
  EXPECT_FALSE(parse_size("-1", s));
  EXPECT_FALSE(parse_size("1T", s));
  EXPECT_FALSE(parse_size("99999999999999999999", s));
  std::string c;
  EXPECT_TRUE(parse_choice("auto", "auto|on|off", c));
  EXPECT_FALSE(parse_choice("au", "auto|on|off", c));
}

}  // namespace
}  // namespace sieve::config
