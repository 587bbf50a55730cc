#include "plugin/net/nccl_fallbacks.h"

#include <cerrno>
#include <cstdlib>

#include "net/log.h"

namespace sieve::plugin {

int64_t sieve_or_nccl(int64_t sieve_value, const char* nccl_name, int64_t lo, int64_t hi, int64_t fallback,
                      const EnvironmentLookup& environment) {
  if (sieve_value >= 0) return sieve_value;
  const char* text = environment(nccl_name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 0);
  if (errno != 0 || *end != '\0' || value < lo || value > hi) {
    SIEVE_WARN(
        "%s=%s is not an integer in %lld-%lld: Sieve ignores it (set the SIEVE_ variable of the same "
        "name to choose)",
        nccl_name, text, static_cast<long long>(lo), static_cast<long long>(hi));
    return fallback;
  }
  return value;
}

}  // namespace sieve::plugin
