// SPDX-License-Identifier: Apache-2.0
#include "plugin/config.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

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
  for (const auto& e : r.effective()) EXPECT_EQ(e.source, Source::kDefault) << e.info->name;
}

TEST(Config, EveryParamIsDocumentedAndNamedSieve) {
  for (const auto& p : params()) {
    EXPECT_EQ(std::string(p.name).rfind("SIEVE_", 0), 0u) << p.name;
    EXPECT_GT(std::string(p.doc).size(), 10u) << p.name;
    if (p.kind == Kind::kChoice) { EXPECT_NE(std::string(p.choices).find('|'), std::string::npos) << p.name; }
  }
}

TEST(Config, EnvironmentOverridesDefaultWithType) {
  Registry r({{"SIEVE_NSOCKS", "8"}, {"SIEVE_CHUNK_SIZE", "1M"}, {"SIEVE_SOCKET_FAMILY", "IPv6"}});
  EXPECT_EQ(r.settings().nsocks, 8);
  EXPECT_EQ(r.settings().chunk_size, 1u << 20);
  EXPECT_EQ(r.settings().socket_family, SocketFamily::kIpv6);
  EXPECT_EQ(find(r, "SIEVE_NSOCKS").source, Source::kEnvironment);
  EXPECT_TRUE(r.diagnostics().empty());
}

TEST(Config, BadValueKeepsDefaultAndSaysWhy) {
  Registry r({{"SIEVE_NSOCKS", "many"}, {"SIEVE_SOCKET_FAMILY", "ipx"}});
  EXPECT_EQ(r.settings().nsocks, 0);  // auto
  EXPECT_EQ(r.settings().socket_family, SocketFamily::kAny);
  ASSERT_EQ(r.diagnostics().size(), 2u);
  EXPECT_TRUE(mentions(r, "SIEVE_NSOCKS='many' is not a valid int"));
  EXPECT_TRUE(mentions(r, "SIEVE_SOCKET_FAMILY='ipx' is not a valid one of any|ipv4|ipv6"));
}

// One rule for every variable: a value that parses but lies outside the variable's range is
// reported, naming the range, and the default kept (the transport would otherwise refuse to start).
TEST(Config, OutOfRangeValueKeepsDefaultAndNamesTheRange) {
  Registry r({{"SIEVE_NSOCKS", "99"},
              {"SIEVE_PEER_TIMEOUT_MS", "0"},
              {"SIEVE_RATE_LIMIT_MBPS", "-1"},
              {"SIEVE_PROXY_MAX_DENSITY", "150"},
              {"SIEVE_STATS_INTERVAL", "-3"},
              {"SIEVE_CHUNK_SIZE", "1K"}});
  EXPECT_EQ(r.settings().nsocks, 0);
  EXPECT_EQ(r.settings().peer_timeout_ms, 5000);
  EXPECT_EQ(r.settings().rate_limit_mbps, 0);
  EXPECT_EQ(r.settings().proxy_max_density, 90);
  EXPECT_EQ(r.settings().stats_interval_s, 15);
  EXPECT_EQ(r.settings().chunk_size, 512u << 10);
  EXPECT_EQ(r.diagnostics().size(), 6u);
  EXPECT_TRUE(mentions(r, "SIEVE_NSOCKS=99 is outside 0-16; using the default '0'"));
  EXPECT_TRUE(mentions(r, "SIEVE_PEER_TIMEOUT_MS=0 is outside 100-86400000; using the default '5000'"));
  EXPECT_TRUE(mentions(r, "SIEVE_RATE_LIMIT_MBPS=-1 is outside 0-1000000; using the default '0'"));
  EXPECT_TRUE(mentions(r, "SIEVE_PROXY_MAX_DENSITY=150 is outside 0-100; using the default '90'"));
  EXPECT_TRUE(mentions(r, "SIEVE_STATS_INTERVAL=-3 is outside 0-86400; using the default '15'"));
  EXPECT_TRUE(mentions(r, "SIEVE_CHUNK_SIZE=1K is outside 4K-1G; using the default '512K'"));
  for (const char* name : {"SIEVE_NSOCKS", "SIEVE_PEER_TIMEOUT_MS", "SIEVE_PROXY_MAX_DENSITY"})
    EXPECT_EQ(find(r, name).source, Source::kDefault) << name;
}

TEST(Config, RangeBoundsAreInclusiveAndOpenEndsUnbounded) {
  Registry r({{"SIEVE_NSOCKS", "16"}, {"SIEVE_PROXY_MAX_DENSITY", "0"}, {"SIEVE_PROXY_MIN_COUNT", "9000000000000"}});
  EXPECT_TRUE(r.diagnostics().empty()) << r.diagnostics().front();
  EXPECT_EQ(r.settings().nsocks, 16);
  EXPECT_EQ(r.settings().proxy_max_density, 0);
  EXPECT_EQ(r.settings().proxy_min_count, 9000000000000);
  Registry below({{"SIEVE_PROXY_MIN_COUNT", "-1"}, {"SIEVE_TRACK_LAG", "0"}});
  EXPECT_EQ(below.diagnostics().size(), 2u);
  EXPECT_TRUE(mentions(below, "SIEVE_PROXY_MIN_COUNT=-1 is outside >= 0"));
  EXPECT_EQ(below.settings().track_lag, 2);
}

// Every numeric variable declares a range, the range parses, and the default lies inside it.
TEST(Config, EveryNumericParamHasAValidRangeHoldingItsDefault) {
  for (const auto& p : params()) {
    if (p.kind != Kind::kInt && p.kind != Kind::kSize) {
      EXPECT_STREQ(p.range, "") << p.name;
      continue;
    }
    EXPECT_FALSE(range_text(p).empty()) << p.name << " has no range";
    EXPECT_TRUE(in_range(p, p.default_text))
        << p.name << ": default " << p.default_text << " outside " << range_text(p);
  }
}

// SIEVE_LIBRARY is read by the Python binding, not the library, but it is a Sieve variable a user
// sets: reporting it as unknown would be a false alarm (and fail sieve-info's health check).
TEST(Config, VariablesReadByTheBindingAreKnown) {
  Registry r(std::map<std::string, std::string>{{"SIEVE_LIBRARY", "/opt/sieve/lib/libnccl-net-sieve.so"}});
  EXPECT_TRUE(r.diagnostics().empty()) << r.diagnostics().front();
}

// A variable only one transport reads is reported while the other carries the data; shared ones
// and ones left at their default never are, and a refused value is reported once (as refused).
TEST(Config, VariablesOnlyTheOtherTransportReadsAreSetWithoutEffect) {
  Registry r({{"SIEVE_NSOCKS", "2"},
              {"SIEVE_WIRE_CODEC", "sometimes"},  // refused: reported as such, not again here
              {"SIEVE_IB_QPS", "4"},
              {"SIEVE_IB_HCA", "mlx5_0"},
              {"SIEVE_PEER_TIMEOUT_MS", "1000"}});
  std::vector<std::string> under_verbs, under_tcp;
  for (const ParamInfo* p : r.set_without_effect(Scope::kVerbs)) under_verbs.push_back(p->name);
  for (const ParamInfo* p : r.set_without_effect(Scope::kTcp)) under_tcp.push_back(p->name);
  EXPECT_EQ(under_verbs, std::vector<std::string>({"SIEVE_NSOCKS"}));
  EXPECT_EQ(under_tcp, std::vector<std::string>({"SIEVE_IB_HCA", "SIEVE_IB_QPS"}));
  EXPECT_EQ(without_effect_text(r.set_without_effect(Scope::kVerbs), Scope::kVerbs),
            "SIEVE_NSOCKS has no effect: only the TCP transport reads it, and verbs carry the data");
  EXPECT_EQ(without_effect_text(r.set_without_effect(Scope::kTcp), Scope::kTcp),
            "SIEVE_IB_HCA, SIEVE_IB_QPS have no effect: only the verbs transport reads them, and TCP carries the data");
  const Registry shared_only(std::map<std::string, std::string>{{"SIEVE_PEER_TIMEOUT_MS", "1000"}});
  EXPECT_TRUE(shared_only.set_without_effect(Scope::kVerbs).empty());
}

TEST(Config, TransportVariablesNameTheirTransport) {
  for (const auto& p : params()) {
    const std::string name = p.name;
    // Verbs settings are the SIEVE_IB_* ones, and all of them.
    EXPECT_EQ(p.scope == Scope::kVerbs, name.rfind("SIEVE_IB_", 0) == 0) << name;
  }
  EXPECT_STREQ(scope_name(Scope::kTcp), "tcp");
  EXPECT_STREQ(scope_name(Scope::kVerbs), "ib");  // the SIEVE_TRANSPORT value
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
  int c = -1;
  EXPECT_TRUE(parse_choice("off", "auto|on|off", c));
  EXPECT_EQ(c, 2);
  EXPECT_FALSE(parse_choice("au", "auto|on|off", c));
  EXPECT_EQ(c, 2);
}

// Numbers are read as a person reads them: decimal, a leading zero changes nothing (C's octal
// would make 010 eight and 08 an error), and there is no hex.
TEST(Config, NumbersAreDecimalWhateverTheirLeadingZeros) {
  int64_t i = 0;
  EXPECT_TRUE(parse_int("010", i));
  EXPECT_EQ(i, 10);
  EXPECT_TRUE(parse_int("08", i));
  EXPECT_EQ(i, 8);
  EXPECT_TRUE(parse_int("-010", i));
  EXPECT_EQ(i, -10);
  EXPECT_FALSE(parse_int("0x10", i));
  uint64_t s = 0;
  EXPECT_TRUE(parse_size("010K", s));
  EXPECT_EQ(s, 10u << 10);
  EXPECT_FALSE(parse_size("0x10", s));

  Registry r({{"SIEVE_NSOCKS", "010"}, {"SIEVE_PEER_TIMEOUT_MS", "010000"}, {"SIEVE_NTHREADS", "08"}});
  EXPECT_TRUE(r.diagnostics().empty()) << r.diagnostics()[0];
  EXPECT_EQ(r.settings().nsocks, 10);
  EXPECT_EQ(r.settings().peer_timeout_ms, 10000);
  EXPECT_EQ(r.settings().nthreads, 8);
}

// A Choice is held as its enum: every choice's text, in any spelling the registry accepts, sets the
// enum value at the same position, and choice_text() gives the registry's spelling back.
TEST(Config, ChoicesAreTypedEnumsInTheRegistrysOrder) {
  Registry r({{"SIEVE_TRACK", " Observe "},
              {"SIEVE_STATS_MODE", "0644"},
              {"SIEVE_DUMP_SIGNAL", "off"},
              {"SIEVE_TRANSPORT", "IB"},
              {"SIEVE_LOG_LEVEL", "trace"},
              {"SIEVE_PIN_THREADS", "yes"},
              {"SIEVE_PROGRESS", "helpers"},
              {"SIEVE_WIRE_CODEC", "0"},
              {"SIEVE_STATS_FORMAT", "prometheus"}});
  EXPECT_TRUE(r.diagnostics().empty()) << r.diagnostics()[0];
  const Settings& s = r.settings();
  EXPECT_EQ(s.track, Track::kObserve);
  EXPECT_EQ(s.stats_mode, StatsMode::kWorld);
  EXPECT_EQ(s.dump_signal, DumpSignal::kOff);
  EXPECT_EQ(s.transport, TransportChoice::kIb);
  EXPECT_EQ(s.log_level, LogLevel::kTrace);
  EXPECT_EQ(s.pin_threads, PinThreads::kOn);  // a choice between on and off takes a boolean's spellings
  EXPECT_EQ(s.progress, Progress::kHelpers);
  EXPECT_EQ(s.wire_codec, WireCodec::kOff);
  EXPECT_EQ(s.stats_format, StatsFileFormat::kPrometheus);
  EXPECT_EQ(choice_text(s.track), "observe");
  EXPECT_EQ(choice_text(s.stats_mode), "0644");
  EXPECT_EQ(choice_text(Progress::kInline), "inline");
  EXPECT_EQ(choice_text(LogLevel::kNone), "none");
  // Every choice of every Choice variable round-trips through its enum's position.
  for (const auto& p : params()) {
    if (p.kind != Kind::kChoice) continue;
    EXPECT_STRNE(p.enum_name, "") << p.name;
    const std::string all = p.choices;
    int index = 0;
    for (size_t start = 0;; ++index) {
      const size_t bar = all.find('|', start);
      const std::string choice = all.substr(start, bar == std::string::npos ? bar : bar - start);
      int parsed = -1;
      EXPECT_TRUE(parse_choice(choice, p.choices, parsed)) << p.name << " " << choice;
      EXPECT_EQ(parsed, index) << p.name << " " << choice;
      EXPECT_EQ(choice_text(p.enum_name, index), choice) << p.name;
      if (bar == std::string::npos) break;
      start = bar + 1;
    }
    EXPECT_EQ(index + 1, p.enum_count) << p.name;
  }
}

// A bad choice is refused, as every bad value: named with its choices, the default's enum kept.
TEST(Config, BadChoiceNamesTheChoicesAndKeepsTheDefaultEnum) {
  Registry r({{"SIEVE_TRACK", "sometimes"}, {"SIEVE_TRANSPORT", "rdma"}});
  EXPECT_EQ(r.settings().track, Track::kOff);
  EXPECT_EQ(r.settings().transport, TransportChoice::kAuto);
  EXPECT_TRUE(mentions(r, "SIEVE_TRACK='sometimes' is not a valid one of off|on|observe; using the default 'off'"));
  EXPECT_TRUE(mentions(r, "SIEVE_TRANSPORT='rdma' is not a valid one of auto|tcp|ib"));
}

// The registry's own list of former names is sound: a renamed variable's replacement is a variable,
// and a former name is no variable itself.
TEST(Config, FormerNamesPointAtVariables) {
  for (const FormerName& f : former_names()) {
    EXPECT_EQ(std::string(f.name).rfind("SIEVE_", 0), 0u) << f.name;
    EXPECT_EQ(closest_param_name(f.name) == f.name, false) << f.name << " is still a variable";
    EXPECT_STRNE(f.since, "") << f.name;
    if (*f.replacement) {
      bool found = false;
      for (const auto& p : params()) found = found || std::string(p.name) == f.replacement;
      EXPECT_TRUE(found) << f.name << " renamed to " << f.replacement << ", which is no variable";
    } else {
      EXPECT_GT(std::string(f.instead).size(), 10u) << f.name << " retired without advice";
    }
  }
}

// A renamed variable is still read, under its new name, with one warning naming the new name; set
// beside its new name, the new one wins. A retired one is refused with the advice, never "unknown".
const std::vector<FormerName> kFormer = {
    {"SIEVE_SOCKETS", "SIEVE_NSOCKS", "0.9", ""},
    {"SIEVE_OLD_TRACK", "SIEVE_TRACK", "0.9", ""},
    {"SIEVE_ZERO_COPY", "", "0.8", "the TCP transport always sends from NCCL's buffer"},
};

TEST(Config, DeprecatedNameIsReadAsItsReplacementWithOneWarning) {
  const Registry r = Registry::with_former_names({{"SIEVE_SOCKETS", "4"}, {"SIEVE_OLD_TRACK", "observe"}}, kFormer);
  EXPECT_EQ(r.settings().nsocks, 4);
  EXPECT_EQ(r.settings().track, Track::kObserve);
  EXPECT_EQ(find(r, "SIEVE_NSOCKS").source, Source::kEnvironment);
  ASSERT_EQ(r.diagnostics().size(), 2u);
  EXPECT_TRUE(mentions(r,
                       "SIEVE_SOCKETS is deprecated: it was renamed SIEVE_NSOCKS in 0.9 and is read as SIEVE_NSOCKS "
                       "for now; set SIEVE_NSOCKS instead"));
  EXPECT_TRUE(mentions(r, "SIEVE_OLD_TRACK is deprecated: it was renamed SIEVE_TRACK"));
}

TEST(Config, DeprecatedNameBesideItsReplacementIsIgnored) {
  const Registry r = Registry::with_former_names({{"SIEVE_SOCKETS", "4"}, {"SIEVE_NSOCKS", "2"}}, kFormer);
  EXPECT_EQ(r.settings().nsocks, 2);
  ASSERT_EQ(r.diagnostics().size(), 1u);
  EXPECT_TRUE(
      mentions(r, "SIEVE_SOCKETS is deprecated (renamed SIEVE_NSOCKS in 0.9) and ignored: SIEVE_NSOCKS is set too"));
}

TEST(Config, DeprecatedNameWithABadValueIsRefusedAsItsReplacementWouldBe) {
  const Registry r = Registry::with_former_names({{"SIEVE_SOCKETS", "99"}}, kFormer);
  EXPECT_EQ(r.settings().nsocks, 0);
  EXPECT_EQ(r.diagnostics().size(), 2u);
  EXPECT_TRUE(mentions(r, "SIEVE_NSOCKS=99 is outside 0-16"));
}

TEST(Config, RetiredNameIsRefusedWithAdviceNotAsUnknown) {
  const Registry r = Registry::with_former_names({{"SIEVE_ZERO_COPY", "1"}}, kFormer);
  ASSERT_EQ(r.diagnostics().size(), 1u);
  EXPECT_EQ(r.diagnostics()[0],
            "SIEVE_ZERO_COPY was retired in 0.8 and is ignored: the TCP transport always sends from NCCL's buffer");
  // Without the list, the same name is just unknown.
  EXPECT_TRUE(
      mentions(Registry::with_former_names({{"SIEVE_ZERO_COPY", "1"}}, {}), "unknown variable SIEVE_ZERO_COPY"));
}

}  // namespace
}  // namespace sieve::config
