// SPDX-License-Identifier: Apache-2.0
// `sieve-info masks FILE [--json]`: checks a safetensors mask file before a run and reports its
// mask tensors (BOOL/U8, in data-offset order), elements, kept elements and density.
#pragma once

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

// args: the arguments after "masks". Returns the exit code: 0 fine, 1 the file is refused, 2 usage.
int sieve_info_masks(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int sieve_info_masks(const std::vector<std::string>& args, std::FILE* out, std::FILE* err);
