// SPDX-License-Identifier: Apache-2.0
// The two renderings of a Report: readable text (default) and JSON (--json) for machines.
#pragma once

#include <ostream>

#include "tools/sieve-info/report.h"

namespace sieve::info {

void print_text(const Report& report, std::ostream& out);
void print_json(const Report& report, std::ostream& out);

std::string hex(uint64_t value);  // "0x1f"

}  // namespace sieve::info
