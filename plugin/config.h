// SPDX-License-Identifier: Apache-2.0
// The typed SIEVE_* configuration registry. Every variable is declared once in config_params.def;
// this header turns that table into typed settings, describes them for sieve-info and the README,
// and reports unknown SIEVE_* names (with the closest known name), values that do not parse or lie
// outside their range, and former names (renamed: read as the new name; retired: ignored). A bad
// value never stops anything: it is reported and the default kept.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sieve::config {

enum class Kind { kBool, kInt, kSize, kString, kChoice };

// Which transport reads a variable: Any, or only one of the two. The transports share the rest.
enum class Scope { kAny, kTcp, kVerbs };

// A Choice variable's enum: ChoiceTraits<E>::count values, the choices in the registry's order.
template <typename E> struct ChoiceTraits;

// Each Choice(E, Value...) of config_params.def declares `enum class E { Value... }` here.
#define SIEVE_ENUM_Bool
#define SIEVE_ENUM_Int
#define SIEVE_ENUM_Size
#define SIEVE_ENUM_String
#define SIEVE_ENUM_Choice(E, ...)                \
  enum class E { __VA_ARGS__ };                  \
  template <> struct ChoiceTraits<E> {           \
    enum Values { __VA_ARGS__, kSieveCount };    \
    static constexpr int count = kSieveCount;    \
    static constexpr const char* type_name = #E; \
  };
#define SIEVE_PARAM(kind, member, name, def, choices, range, scope, doc) SIEVE_ENUM_##kind
#include "plugin/config_params.def"
#undef SIEVE_PARAM

// The C++ type that holds each kind of value (a Choice: its enum), and the Kind itself, from the
// first column of config_params.def.
#define SIEVE_TYPE_Bool bool
#define SIEVE_TYPE_Int int64_t
#define SIEVE_TYPE_Size uint64_t
#define SIEVE_TYPE_String std::string
#define SIEVE_TYPE_Choice(E, ...) E
#define SIEVE_KIND_Bool Kind::kBool
#define SIEVE_KIND_Int Kind::kInt
#define SIEVE_KIND_Size Kind::kSize
#define SIEVE_KIND_String Kind::kString
#define SIEVE_KIND_Choice(E, ...) Kind::kChoice
#define SIEVE_ENUM_NAME_Bool ""
#define SIEVE_ENUM_NAME_Int ""
#define SIEVE_ENUM_NAME_Size ""
#define SIEVE_ENUM_NAME_String ""
#define SIEVE_ENUM_NAME_Choice(E, ...) #E
#define SIEVE_ENUM_COUNT_Bool 0
#define SIEVE_ENUM_COUNT_Int 0
#define SIEVE_ENUM_COUNT_Size 0
#define SIEVE_ENUM_COUNT_String 0
#define SIEVE_ENUM_COUNT_Choice(E, ...) ChoiceTraits<E>::count

// Static description of one variable, straight from config_params.def.
struct ParamInfo {
  Kind kind;
  const char* name;
  const char* default_text;
  const char* choices;  // "" unless kind == Choice
  const char* range;    // "lo..hi" or "lo.." for Int and Size, "" for the other kinds
  Scope scope;
  const char* doc;
  const char* enum_name;  // a Choice's enum type ("SocketFamily"), else ""
  int enum_count;         // how many values that enum has, else 0
};

// A name that is no longer a variable: renamed (replacement set: still read as the replacement,
// with a warning) or retired (replacement empty: reported, `instead` says what to do).
struct FormerName {
  const char* name;
  const char* replacement;  // "" when retired
  const char* since;        // the version that renamed or retired it
  const char* instead;      // retired: what to do instead; "" when renamed
};
const std::vector<FormerName>& former_names();

const std::vector<ParamInfo>& params();
const char* kind_name(Kind kind);
// "any", "tcp", "ib": the SIEVE_TRANSPORT value that reads the variable.
const char* scope_name(Scope scope);

// The variable's range as users read it: "0-16", "4K-1G", ">= 0"; "" for kinds without one.
std::string range_text(const ParamInfo& info);
// Whether `value` (text of the variable's kind) parses and lies in its range; true for kinds
// without a range once the text parses.
bool in_range(const ParamInfo& info, const std::string& value);

// Typed values, one member per variable.
struct Settings {
#define SIEVE_PARAM(kind, member, name, def, choices, range, scope, doc) SIEVE_TYPE_##kind member{};
#include "plugin/config_params.def"
#undef SIEVE_PARAM
};

// The text of a choice ("ipv4" for SocketFamily::kIpv4), for logs and reports.
std::string choice_text(const char* enum_name, int index);
template <typename E> std::string choice_text(E value) {
  return choice_text(ChoiceTraits<E>::type_name, static_cast<int>(value));
}

enum class Source { kDefault, kEnvironment };

struct Effective {
  const ParamInfo* info;
  std::string value;  // the text in force
  Source source;
};

class Registry {
 public:
  // Builds settings from a snapshot of the environment (only SIEVE_* names are looked at).
  explicit Registry(const std::map<std::string, std::string>& env);
  // The same with another list of former names (tests).
  static Registry with_former_names(const std::map<std::string, std::string>& env,
                                    const std::vector<FormerName>& former);

  // The process's registry, read from environ once, on first use (thread-safe).
  static const Registry& process();

  const Settings& settings() const { return settings_; }
  const std::vector<Effective>& effective() const { return effective_; }
  // One line per problem: unknown SIEVE_* variable (with suggestion), a value that does not parse
  // or lies outside the variable's range (default kept, range named), a deprecated name (read as
  // its replacement) or a retired one (ignored).
  const std::vector<std::string>& diagnostics() const { return diagnostics_; }
  // The variables set in the environment (with a valid value) that only the other transport
  // reads, while `in_use` carries the data: settings that have no effect, in registry order.
  std::vector<const ParamInfo*> set_without_effect(Scope in_use) const;

 private:
  Registry(const std::map<std::string, std::string>& env, const std::vector<FormerName>* former);

  Settings settings_;
  std::vector<Effective> effective_;
  std::vector<std::string> diagnostics_;
};

// One sentence for the user about set_without_effect's answer (non-empty), e.g. "SIEVE_NSOCKS has
// no effect: only the TCP transport reads it, and verbs carry the data".
std::string without_effect_text(const std::vector<const ParamInfo*>& unused, Scope in_use);

// Snapshot of the SIEVE_* variables of this process's environment.
std::map<std::string, std::string> environment_snapshot();

// Closest known variable name to `name` by edit distance ("" when nothing is close).
std::string closest_param_name(const std::string& name);

// Value parsers, exposed for tests. Return false (and leave `out` untouched) on bad text.
bool parse_bool(const std::string& text, bool& out);
bool parse_int(const std::string& text, int64_t& out);
bool parse_size(const std::string& text, uint64_t& out);
// `index`: the position of the choice `text` names in the '|'-separated `choices`.
bool parse_choice(const std::string& text, const char* choices, int& index);

}  // namespace sieve::config
