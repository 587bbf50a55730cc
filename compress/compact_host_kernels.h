// SPDX-License-Identifier: Apache-2.0
// Internal to compact_host: one thread's part of a gather or scatter, per instruction set. A part is
// elements [begin, end) of the mask; its compact elements are [compact, compact_end). Every path
// writes exactly what the scalar one writes; vector loads and stores stay inside the part's buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sieve::compress::detail {

// src/dst: element 0 of the masked buffer. in_place: compact aliases dst, so the part runs from its
// end down (every compact element is read before the element it lands on is written). stream: use
// non-temporal stores where they line up (never in place).
using GatherPart = void (*)(size_t element_size, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* src,
                            uint8_t* compact, const uint8_t* compact_end, bool stream);
using ScatterPart = void (*)(size_t element_size, const uint32_t* bits, uint64_t begin, uint64_t end,
                             const uint8_t* compact, const uint8_t* compact_end, uint8_t* dst, bool in_place,
                             bool stream);

void compact_gather_scalar(size_t element_size, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* src,
                           uint8_t* compact, const uint8_t* compact_end, bool stream);
void compact_scatter_scalar(size_t element_size, const uint32_t* bits, uint64_t begin, uint64_t end,
                            const uint8_t* compact, const uint8_t* compact_end, uint8_t* dst, bool in_place,
                            bool stream);
void compact_gather_avx2(size_t element_size, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* src,
                         uint8_t* compact, const uint8_t* compact_end, bool stream);
void compact_scatter_avx2(size_t element_size, const uint32_t* bits, uint64_t begin, uint64_t end,
                          const uint8_t* compact, const uint8_t* compact_end, uint8_t* dst, bool in_place, bool stream);
void compact_gather_avx512(size_t element_size, const uint32_t* bits, uint64_t begin, uint64_t end, const uint8_t* src,
                           uint8_t* compact, const uint8_t* compact_end, bool stream);
void compact_scatter_avx512(size_t element_size, const uint32_t* bits, uint64_t begin, uint64_t end,
                            const uint8_t* compact, const uint8_t* compact_end, uint8_t* dst, bool in_place,
                            bool stream);

}  // namespace sieve::compress::detail
