// The typed SIEVE_* configuration registry. Every variable is declared once in config_params.def;
// this header turns that table into typed settings, describes them for sieve-info and the README,
// and reports unknown SIEVE_* names (with the closest known name) and values that do not parse or
// lie outside their range. A bad value never stops anything: it is reported and the default kept.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sieve::config {

enum class Kind { Bool, Int, Size, String, Choice };

// Which transport reads a variable: Any, or only one of the two. The transports share the rest.
enum class Scope { Any, Tcp, Verbs };

// C++ type that holds each kind of value.
template <Kind K> struct KindType;
template <> struct KindType<Kind::Bool> { using type = bool; };
template <> struct KindType<Kind::Int> { using type = int64_t; };
template <> struct KindType<Kind::Size> { using type = uint64_t; };
template <> struct KindType<Kind::String> { using type = std::string; };
template <> struct KindType<Kind::Choice> { using type = std::string; };

// Static description of one variable, straight from config_params.def.
struct ParamInfo {
  Kind kind;
  const char* name;
  const char* default_text;
  const char* choices;  // "" unless kind == Choice
  const char* range;    // "lo..hi" or "lo.." for Int and Size, "" for the other kinds
  Scope scope;
  const char* doc;
};

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
#define SIEVE_PARAM(kind, member, name, def, choices, range, scope, doc) KindType<Kind::kind>::type member{};
#include "plugin/config_params.def"
#undef SIEVE_PARAM
};

enum class Source { Default, Environment };

struct Effective {
  const ParamInfo* info;
  std::string value;  // the text in force
  Source source;
};

class Registry {
 public:
  // Builds settings from a snapshot of the environment (only SIEVE_* names are looked at).
  explicit Registry(const std::map<std::string, std::string>& env);

  // The process's registry, read from environ once, on first use (thread-safe).
  static const Registry& process();

  const Settings& settings() const { return settings_; }
  const std::vector<Effective>& effective() const { return effective_; }
  // One line per problem: unknown SIEVE_* variable (with suggestion), or a value that does not parse
  // or lies outside the variable's range (default kept, range named).
  const std::vector<std::string>& diagnostics() const { return diagnostics_; }
  // The variables set in the environment (with a valid value) that only the other transport
  // reads, while `in_use` carries the data: settings that have no effect, in registry order.
  std::vector<const ParamInfo*> set_without_effect(Scope in_use) const;

 private:
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
bool parse_choice(const std::string& text, const char* choices, std::string& out);

}  // namespace sieve::config
