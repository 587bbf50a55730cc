// SPDX-License-Identifier: Apache-2.0
// The README's configuration table is what users read: it must name every variable of the
// registry and nothing else, state each one's default and range as the registry has them, and
// what it promises about bad values ("reported, naming the range, and the default kept") must be
// what the registry does with a value just outside the range the README states.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "plugin/config.h"

#ifndef SIEVE_SOURCE_DIR
#error "SIEVE_SOURCE_DIR must point at the source tree"
#endif

namespace sieve::config {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(' ') - b + 1);
}

// Splits "| a | b \| c | d |" into {"a", "b | c", "d"}: Markdown escapes a bar inside a cell.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      out.push_back(trim(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return out;
}

std::string unquote(const std::string& cell) {
  if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') return cell.substr(1, cell.size() - 2);
  return cell;
}

struct Row {
  std::string type;      // "int", "size", "choice text", ...
  std::string range;     // what follows ", " in the type cell: "0-16", ">= 0"; "" when none
  std::string default_;  // the default cell, back-quotes removed
};

// Rows of the table: each starts "| `SIEVE_NAME` |".
std::map<std::string, Row> table_rows() {
  std::ifstream in(std::string(SIEVE_SOURCE_DIR) + "/README.md");
  EXPECT_TRUE(in.good()) << "README.md not found under " << SIEVE_SOURCE_DIR;
  const std::string open = "| `SIEVE_";
  std::map<std::string, Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, open.size(), open) != 0) continue;
    const std::vector<std::string> c = cells(line);
    if (c.size() < 4) {
      ADD_FAILURE() << "README row with fewer than 4 cells: " << line;
      continue;
    }
    Row row;
    const size_t comma = c[1].find(", ");
    row.type = c[1].substr(0, comma);
    if (comma != std::string::npos) row.range = c[1].substr(comma + 2);
    row.default_ = unquote(c[2]);
    rows[unquote(c[0])] = row;
  }
  return rows;
}

const ParamInfo* param(const std::string& name) {
  for (const auto& p : params())
    if (name == p.name) return &p;
  return nullptr;
}

TEST(ReadmeConfigTable, ListsEveryRegistryVariableAndNoOther) {
  const std::map<std::string, Row> documented = table_rows();
  for (const auto& p : params()) EXPECT_TRUE(documented.count(p.name)) << p.name << " has no README table row";
  for (const auto& [name, row] : documented)
    EXPECT_TRUE(param(name)) << name << " is in the README but not the registry";
}

// The default cell is the registry's default; an empty default (strings) is described in brackets.
TEST(ReadmeConfigTable, StatesEachDefault) {
  for (const auto& [name, row] : table_rows()) {
    const ParamInfo* p = param(name);
    if (!p) continue;
    if (std::string(p->default_text).empty())
      EXPECT_EQ(row.default_.front(), '(') << name << ": empty default shown as '" << row.default_ << "'";
    else EXPECT_EQ(row.default_, p->default_text) << name;
  }
}

// The type cell names the kind (the choices for a choice) and, for numbers, the registry's range.
TEST(ReadmeConfigTable, StatesEachTypeAndRange) {
  for (const auto& [name, row] : table_rows()) {
    const ParamInfo* p = param(name);
    if (!p) continue;
    if (p->kind == Kind::kChoice) EXPECT_EQ(row.type, p->choices) << name;
    else EXPECT_EQ(row.type.rfind(kind_name(p->kind), 0), 0u) << name << ": type '" << row.type << "'";
    EXPECT_EQ(row.range, range_text(*p)) << name << ": the README's range differs from the registry's";
  }
}

// The README promises that a value outside the stated range is reported, naming the range, and the
// default kept: try one just below and one just above every stated range.
TEST(ReadmeConfigTable, OutOfRangeValuesAreReportedAndTheDefaultKept) {
  int checked = 0;
  for (const auto& [name, row] : table_rows()) {
    const ParamInfo* p = param(name);
    if (!p || row.range.empty()) continue;
    // Bounds as numbers: sizes in bytes ("4K" = 4096), so one byte below or above is outside.
    auto number = [&](const std::string& text) {
      if (p->kind == Kind::kSize) {
        uint64_t bytes = 0;
        EXPECT_TRUE(parse_size(text, bytes)) << name << ": bound '" << text << "'";
        return static_cast<long long>(bytes);
      }
      return std::stoll(text);
    };
    std::vector<std::string> outside;
    const bool open_ended = row.range.rfind(">= ", 0) == 0;
    const size_t dash = row.range.find('-', 1);
    ASSERT_TRUE(open_ended || dash != std::string::npos) << name << ": range '" << row.range << "'";
    const long long low = number(open_ended ? row.range.substr(3) : row.range.substr(0, dash));
    if (p->kind == Kind::kInt || low > 0) outside.push_back(std::to_string(low - 1));  // sizes cannot go below 0
    if (!open_ended) outside.push_back(std::to_string(number(row.range.substr(dash + 1)) + 1));
    for (const auto& value : outside) {
      Registry r(std::map<std::string, std::string>{{name, value}});
      ASSERT_EQ(r.diagnostics().size(), 1u) << name << "=" << value << " was accepted silently";
      EXPECT_NE(r.diagnostics()[0].find(row.range), std::string::npos) << r.diagnostics()[0];
      for (const auto& e : r.effective())
        if (name == e.info->name) {
          EXPECT_EQ(e.source, Source::kDefault) << name << "=" << value;
          EXPECT_EQ(e.value, row.default_) << name << "=" << value;
        }
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

}  // namespace
}  // namespace sieve::config
