// SPDX-License-Identifier: Apache-2.0
// The reading side of the tools' JSON: what a child process reports (the training and Gloo scripts
// sieve-bench runs, iperf3 for sieve-perf) parsed with compress/json's strict reader, and its
// members taken by name. One reader for every report, instead of a text search per tool.
#pragma once

#include <string>
#include <vector>

#include "compress/json.h"

namespace sieve::tools::json_fields {

using compress::json::Value;

// The last line of `text` that is a whole JSON object (a script's report: what it logged before is
// passed over). False when there is none.
bool last_object_line(const std::string& text, Value* out);
// `text` as one JSON document (iperf3 -J writes one over many lines). False when it is not one.
bool whole(const std::string& text, Value* out);

// The first member named `key` anywhere inside `value`, in document order (depth first); nullptr.
const Value* find_anywhere(const Value& value, const std::string& key);

// `object`'s member `key`: a number (false, *out untouched, when absent or not a number), the
// numbers of an array (empty when absent; non-numbers skipped), a string ("" when absent).
bool number(const Value& object, const std::string& key, double* out);
double number_or(const Value& object, const std::string& key, double fallback);
std::vector<double> numbers(const Value& object, const std::string& key);
std::string string(const Value& object, const std::string& key);

}  // namespace sieve::tools::json_fields
