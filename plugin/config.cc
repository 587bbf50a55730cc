// SPDX-License-Identifier: Apache-2.0
#include "plugin/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <type_traits>

extern char** environ;

namespace sieve::config {

namespace {

#define SIEVE_PARAM(kind, member, name, def, choices, range, scope, doc) \
  {SIEVE_KIND_##kind, name, def, choices, range, Scope::k##scope, doc, SIEVE_ENUM_NAME_##kind, SIEVE_ENUM_COUNT_##kind},
constexpr ParamInfo kParams[] = {
#include "plugin/config_params.def"
};
#undef SIEVE_PARAM

constexpr int choice_count(const char* choices) {
  if (*choices == '\0') return 0;
  int n = 1;
  for (; *choices; ++choices) n += *choices == '|' ? 1 : 0;
  return n;
}

// A Choice's enum values stand for its choices by position: the build fails where they cannot.
#define SIEVE_PARAM(kind, member, name, def, choices, range, scope, doc) \
  static_assert(choice_count(choices) == SIEVE_ENUM_COUNT_##kind, name ": Choice(E, ...) needs one value per choice");
#include "plugin/config_params.def"
#undef SIEVE_PARAM

}  // namespace

const std::vector<ParamInfo>& params() {
  static const std::vector<ParamInfo> table(std::begin(kParams), std::end(kParams));
  return table;
}

const std::vector<FormerName>& former_names() {
  static const std::vector<FormerName> table = {
#define SIEVE_PARAM(kind, member, name, def, choices, range, scope, doc)
#define SIEVE_DEPRECATED(old_name, new_name, since) {old_name, new_name, since, ""},
#define SIEVE_RETIRED(old_name, since, instead) {old_name, "", since, instead},
#include "plugin/config_params.def"
#undef SIEVE_RETIRED
#undef SIEVE_DEPRECATED
#undef SIEVE_PARAM
  };
  return table;
}

std::string choice_text(const char* enum_name, int index) {
  for (const ParamInfo& p : params()) {
    if (std::strcmp(p.enum_name, enum_name) != 0) continue;
    const std::string all = p.choices;
    size_t start = 0;
    for (int i = 0; i < index && start != std::string::npos; ++i) {
      start = all.find('|', start);
      if (start != std::string::npos) ++start;
    }
    if (start == std::string::npos || index < 0) break;
    return all.substr(start, all.find('|', start) - start);
  }
  return "?";
}

const char* scope_name(Scope scope) {
  switch (scope) {
    case Scope::kAny: return "any";
    case Scope::kTcp: return "tcp";
    case Scope::kVerbs: return "ib";
  }
  return "?";
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kSize: return "size";
    case Kind::kString: return "string";
    case Kind::kChoice: return "choice";
  }
  return "?";
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Overloads so the X-macro can parse every kind with one call shape.
[[maybe_unused]] bool parse_value(Kind, const ParamInfo&, const std::string& t, bool& out) {
  return parse_bool(t, out);
}
[[maybe_unused]] bool parse_value(Kind, const ParamInfo&, const std::string& t, int64_t& out) {
  return parse_int(t, out);
}
[[maybe_unused]] bool parse_value(Kind, const ParamInfo&, const std::string& t, uint64_t& out) {
  return parse_size(t, out);
}
[[maybe_unused]] bool parse_value(Kind, const ParamInfo&, const std::string& t, std::string& out) {
  out = t;
  return true;
}
template <typename E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
bool parse_value(Kind, const ParamInfo& info, const std::string& t, E& out) {
  int index = 0;
  if (!parse_choice(t, info.choices, index)) return false;
  out = static_cast<E>(index);
  return true;
}

const ParamInfo* find_param(const std::string& name) {
  for (const auto& p : params())
    if (name == p.name) return &p;
  return nullptr;
}

// The bounds of an Int or Size variable, as texts of its kind: "lo..hi" or "lo.." (no upper bound).
struct RangeTexts {
  std::string low, high;  // high "" = unbounded
};

RangeTexts split_range(const ParamInfo& info) {
  const std::string range = info.range;
  const size_t dots = range.find("..");
  if (dots == std::string::npos) return {};
  return {range.substr(0, dots), range.substr(dots + 2)};
}

template <typename T> bool parse_number(const std::string& text, T& out);
template <> bool parse_number(const std::string& text, int64_t& out) { return parse_int(text, out); }
template <> bool parse_number(const std::string& text, uint64_t& out) { return parse_size(text, out); }

// Whether `value` lies in the variable's declared range; an undeclared or unparsable range admits
// nothing, so the registry's own test catches it.
template <typename T> bool value_in_range(const ParamInfo& info, T value) {
  const RangeTexts r = split_range(info);
  T low{}, high{};
  if (!parse_number(r.low, low)) return false;
  if (value < low) return false;
  if (r.high.empty()) return true;
  return parse_number(r.high, high) && value <= high;
}

[[maybe_unused]] bool admits(const ParamInfo& info, int64_t value) { return value_in_range(info, value); }
[[maybe_unused]] bool admits(const ParamInfo& info, uint64_t value) { return value_in_range(info, value); }
[[maybe_unused]] bool admits(const ParamInfo&, bool) { return true; }
[[maybe_unused]] bool admits(const ParamInfo&, const std::string&) { return true; }
template <typename E, std::enable_if_t<std::is_enum_v<E>, int> = 0> bool admits(const ParamInfo&, E) { return true; }

}  // namespace

std::string range_text(const ParamInfo& info) {
  if (info.kind != Kind::kInt && info.kind != Kind::kSize) return "";
  const RangeTexts r = split_range(info);
  if (r.low.empty()) return "";
  return r.high.empty() ? ">= " + r.low : r.low + "-" + r.high;
}

bool in_range(const ParamInfo& info, const std::string& value) {
  switch (info.kind) {
    case Kind::kInt: {
      int64_t v = 0;
      return parse_int(value, v) && value_in_range(info, v);
    }
    case Kind::kSize: {
      uint64_t v = 0;
      return parse_size(value, v) && value_in_range(info, v);
    }
    case Kind::kBool: {
      bool v = false;
      return parse_bool(value, v);
    }
    case Kind::kChoice: {
      int v = 0;
      return parse_choice(value, info.choices, v);
    }
    case Kind::kString: return true;
  }
  return false;
}

bool parse_bool(const std::string& text, bool& out) {
  std::string t = lower(trim(text));
  if (t == "1" || t == "true" || t == "on" || t == "yes") {
    out = true;
    return true;
  }
  if (t == "0" || t == "false" || t == "off" || t == "no") {
    out = false;
    return true;
  }
  return false;
}

bool parse_int(const std::string& text, int64_t& out) {
  std::string t = trim(text);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  // Base 10, as people write numbers: base 0 would read 010 as eight and refuse 08.
  long long v = std::strtoll(t.c_str(), &end, 10);
  if (errno != 0 || end == t.c_str() || *end != '\0') return false;
  out = v;
  return true;
}

bool parse_size(const std::string& text, uint64_t& out) {
  std::string t = trim(text);
  if (t.empty() || t[0] == '-') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (errno != 0 || end == t.c_str()) return false;
  std::string suffix = lower(trim(end));
  if (!suffix.empty() && suffix.back() == 'b') suffix.pop_back();  // "512KB", "4mb"
  if (!suffix.empty() && suffix.back() == 'i') suffix.pop_back();  // "4Mi"
  unsigned shift = 0;
  if (suffix.empty()) shift = 0;
  else if (suffix == "k") shift = 10;
  else if (suffix == "m") shift = 20;
  else if (suffix == "g") shift = 30;
  else return false;
  if (shift && v > (UINT64_MAX >> shift)) return false;
  out = static_cast<uint64_t>(v) << shift;
  return true;
}

bool parse_choice(const std::string& text, const char* choices, int& index) {
  std::string t = lower(trim(text));
  std::string all = choices;
  // A choice between "on" and "off" (and more) takes every spelling of a boolean too: SIEVE_TRACK=1.
  const std::string padded = "|" + all + "|";
  bool flag = false;
  if (padded.find("|on|") != std::string::npos && padded.find("|off|") != std::string::npos && parse_bool(t, flag))
    t = flag ? "on" : "off";
  size_t start = 0;
  for (int i = 0; start <= all.size(); ++i) {
    size_t bar = all.find('|', start);
    std::string choice = all.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
    if (t == choice) {
      index = i;
      return true;
    }
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  return false;
}

std::string closest_param_name(const std::string& name) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& p : params()) {
    size_t d = edit_distance(name, p.name);
    if (d < best_d) {
      best_d = d;
      best = p.name;
    }
  }
  // Suggest only when the typo is plausible: a few edits, relative to the name's own length.
  size_t limit = std::max<size_t>(3, name.size() / 4);
  return best_d <= limit ? best : "";
}

std::map<std::string, std::string> environment_snapshot() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq || std::strncmp(*e, "SIEVE_", 6) != 0) continue;
    env.emplace(std::string(*e, eq - *e), std::string(eq + 1));
  }
  return env;
}

Registry::Registry(const std::map<std::string, std::string>& env) : Registry(env, &former_names()) {}

Registry Registry::with_former_names(const std::map<std::string, std::string>& env,
                                     const std::vector<FormerName>& former) {
  return Registry(env, &former);
}

Registry::Registry(const std::map<std::string, std::string>& environment, const std::vector<FormerName>* former) {
  // Former names first: a renamed one stands in for its replacement, and neither kind is "unknown".
  std::map<std::string, std::string> env = environment;
  for (const FormerName& f : *former) {
    const auto it = env.find(f.name);
    if (it == env.end()) continue;
    const std::string value = it->second;
    env.erase(it);
    const std::string old_name = f.name, since = f.since;
    if (*f.replacement == '\0') {
      diagnostics_.push_back(old_name + " was retired in " + since + " and is ignored: " + f.instead);
    } else if (env.count(f.replacement)) {
      diagnostics_.push_back(old_name + " is deprecated (renamed " + f.replacement + " in " + since +
                             ") and ignored: " + f.replacement + " is set too");
    } else {
      env[f.replacement] = value;
      diagnostics_.push_back(old_name + " is deprecated: it was renamed " + f.replacement + " in " + since +
                             " and is read as " + f.replacement + " for now; set " + f.replacement + " instead");
    }
  }
  for (const auto& [name, value] : env) {
    if (name.rfind("SIEVE_", 0) != 0 || find_param(name)) continue;
    std::string hint = closest_param_name(name);
    diagnostics_.push_back("unknown variable " + name + (hint.empty() ? "" : " (did you mean " + hint + "?)") +
                           "; it is ignored");
  }
  auto apply = [&](const ParamInfo& info, auto& member) {
    bool ok = parse_value(info.kind, info, info.default_text, member);
    (void)ok;  // defaults are checked by the registry's own tests
    auto it = env.find(info.name);
    if (it == env.end()) {
      effective_.push_back({&info, info.default_text, Source::kDefault});
      return;
    }
    auto parsed = member;
    const std::string keep_default = std::string("; using the default '") + info.default_text + "'";
    if (!parse_value(info.kind, info, it->second, parsed)) {
      std::string expected = info.kind == Kind::kChoice ? std::string("one of ") + info.choices : kind_name(info.kind);
      diagnostics_.push_back(std::string(info.name) + "='" + it->second + "' is not a valid " + expected +
                             keep_default);
      effective_.push_back({&info, info.default_text, Source::kDefault});
    } else if (!admits(info, parsed)) {
      diagnostics_.push_back(std::string(info.name) + "=" + trim(it->second) + " is outside " + range_text(info) +
                             keep_default);
      effective_.push_back({&info, info.default_text, Source::kDefault});
    } else {
      member = parsed;
      effective_.push_back({&info, it->second, Source::kEnvironment});
    }
  };
  size_t index = 0;
#define SIEVE_PARAM(kind, member, name, def, choices, range, scope, doc) apply(params()[index++], settings_.member);
#include "plugin/config_params.def"
#undef SIEVE_PARAM
}

std::vector<const ParamInfo*> Registry::set_without_effect(Scope in_use) const {
  std::vector<const ParamInfo*> unused;
  for (const Effective& e : effective_)
    if (e.source == Source::kEnvironment && e.info->scope != Scope::kAny && e.info->scope != in_use)
      unused.push_back(e.info);
  return unused;
}

std::string without_effect_text(const std::vector<const ParamInfo*>& unused, Scope in_use) {
  std::string names;
  for (const ParamInfo* info : unused) names += (names.empty() ? "" : ", ") + std::string(info->name);
  const bool one = unused.size() == 1;
  const bool verbs = in_use == Scope::kVerbs;
  return names + (one ? " has" : " have") + " no effect: only the " + (verbs ? "TCP" : "verbs") + " transport reads " +
         (one ? "it" : "them") + ", and " + (verbs ? "verbs carry" : "TCP carries") + " the data";
}

const Registry& Registry::process() {
  // Never destroyed: code that runs at exit (the proxy's preload report, late NCCL teardown calls) may
  // still read the settings after static destructors have run.
  static const Registry* registry = new Registry(environment_snapshot());
  return *registry;
}

}  // namespace sieve::config
