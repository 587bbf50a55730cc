// SPDX-License-Identifier: Apache-2.0
#include "plugin/net/nccl_fallbacks.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

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

namespace {

bool set_in_environment(const config::Registry& registry, const char* name) {
  for (const config::Effective& e : registry.effective())
    if (std::strcmp(e.info->name, name) == 0) return e.source == config::Source::kEnvironment;
  return false;
}

const char* nccl_text(const EnvironmentLookup& environment, const char* name) {
  const char* text = environment(name);
  return text && *text ? text : nullptr;
}

// One integer setting. `unset_below_zero`: the SIEVE_ variable's -1 means "NCCL's, else default".
struct IntTwin {
  const config::Registry& registry;
  const EnvironmentLookup& environment;
  std::vector<SharedSetting>* out;

  int64_t operator()(const char* sieve_name, int64_t sieve_value, bool unset_below_zero, const char* nccl_name,
                     int64_t lo, int64_t hi, int64_t fallback) {
    Origin origin = Origin::kDefault;
    int64_t value = fallback;
    if (set_in_environment(registry, sieve_name) && !(unset_below_zero && sieve_value < 0)) {
      origin = Origin::kSieve;
      value = sieve_value;
    } else if (nccl_text(environment, nccl_name)) {
      const int64_t nccl = sieve_or_nccl(-1, nccl_name, lo, hi, INT64_MIN, environment);
      if (nccl != INT64_MIN) {
        origin = Origin::kNccl;
        value = nccl;
      }
    }
    out->push_back({sieve_name, nccl_name, value < 0 && unset_below_zero ? "auto" : std::to_string(value), origin});
    return value;
  }
};

}  // namespace

const char* origin_name(Origin origin) {
  switch (origin) {
    case Origin::kSieve: return "sieve";
    case Origin::kNccl: return "nccl";
    case Origin::kDefault: return "default";
  }
  return "default";
}

std::vector<SharedSetting> resolve_ib_options(const config::Registry& registry, const EnvironmentLookup& environment,
                                              net::TransportOptions* o) {
  const config::Settings& s = registry.settings();
  std::vector<SharedSetting> out;
  IntTwin pick{registry, environment, &out};

  // SIEVE_IB_HCA: NCCL_IB_HCA has the same syntax.
  Origin hca = Origin::kDefault;
  o->ib_hca = "";
  if (set_in_environment(registry, "SIEVE_IB_HCA") && !s.ib_hca.empty()) {
    hca = Origin::kSieve;
    o->ib_hca = s.ib_hca;
  } else if (const char* text = nccl_text(environment, "NCCL_IB_HCA")) {
    hca = Origin::kNccl;
    o->ib_hca = text;
  }
  out.push_back({"SIEVE_IB_HCA", "NCCL_IB_HCA", o->ib_hca, hca});

  o->ib_gid_index =
      static_cast<int>(pick("SIEVE_IB_GID_INDEX", s.ib_gid_index, true, "NCCL_IB_GID_INDEX", -1, 1023, -1));

  // The address family: NCCL spells it AF_INET / AF_INET6 (and takes anything else as AF_INET;
  // Sieve says so rather than guess).
  Origin family = Origin::kDefault;
  o->ib_addr_family = net::Family::kAny;
  const auto family_of = [](config::IbAddrFamily v) {
    switch (v) {
      case config::IbAddrFamily::kIpv4: return net::Family::kIPv4;
      case config::IbAddrFamily::kIpv6: return net::Family::kIPv6;
      case config::IbAddrFamily::kAny: break;
    }
    return net::Family::kAny;
  };
  if (set_in_environment(registry, "SIEVE_IB_ADDR_FAMILY")) {
    family = Origin::kSieve;
    o->ib_addr_family = family_of(s.ib_addr_family);
  } else if (const char* text = nccl_text(environment, "NCCL_IB_ADDR_FAMILY")) {
    if (std::strcmp(text, "AF_INET") == 0 || std::strcmp(text, "AF_INET6") == 0) {
      family = Origin::kNccl;
      o->ib_addr_family = std::strcmp(text, "AF_INET") == 0 ? net::Family::kIPv4 : net::Family::kIPv6;
    } else {
      SIEVE_WARN(
          "NCCL_IB_ADDR_FAMILY=%s is neither AF_INET nor AF_INET6: Sieve ignores it (set SIEVE_IB_ADDR_FAMILY "
          "to choose)",
          text);
    }
  }
  out.push_back({"SIEVE_IB_ADDR_FAMILY", "NCCL_IB_ADDR_FAMILY",
                 o->ib_addr_family == net::Family::kIPv4   ? "ipv4"
                 : o->ib_addr_family == net::Family::kIPv6 ? "ipv6"
                                                           : "any",
                 family});

  Origin range = Origin::kDefault;
  o->ib_addr_range = "";
  if (set_in_environment(registry, "SIEVE_IB_ADDR_RANGE") && !s.ib_addr_range.empty()) {
    range = Origin::kSieve;
    o->ib_addr_range = s.ib_addr_range;
  } else if (const char* text = nccl_text(environment, "NCCL_IB_ADDR_RANGE")) {
    range = Origin::kNccl;
    o->ib_addr_range = text;  // the transport checks it and names the variable when it is not a range
  }
  out.push_back({"SIEVE_IB_ADDR_RANGE", "NCCL_IB_ADDR_RANGE", o->ib_addr_range, range});

  // NCCL takes up to 128 queue pairs per connection; Sieve's messages split across at most 16.
  int64_t qps = pick("SIEVE_IB_QPS", s.ib_qps, false, "NCCL_IB_QPS_PER_CONNECTION", 1, 128, s.ib_qps);
  if (qps > 16) {
    SIEVE_WARN("NCCL_IB_QPS_PER_CONNECTION=%lld: Sieve uses 16 queue pairs per connection, its most",
               static_cast<long long>(qps));
    qps = 16;
    out.back().value = "16";
  }
  o->ib_qps = static_cast<int>(qps);

  o->ib_traffic_class = static_cast<int>(pick("SIEVE_IB_TC", s.ib_tc, true, "NCCL_IB_TC", 0, 255, -1));
  o->ib_service_level = static_cast<int>(pick("SIEVE_IB_SL", s.ib_sl, true, "NCCL_IB_SL", 0, 15, -1));
  o->ib_timeout =
      static_cast<int>(pick("SIEVE_IB_TIMEOUT", s.ib_timeout, false, "NCCL_IB_TIMEOUT", 1, 31, s.ib_timeout));
  o->ib_retry_count =
      static_cast<int>(pick("SIEVE_IB_RETRY_CNT", s.ib_retry_cnt, false, "NCCL_IB_RETRY_CNT", 0, 7, s.ib_retry_cnt));
  // NCCL's 2 is "where ibv_reg_mr_iova2 exists", which the verbs transport requires: on.
  o->ib_relaxed_ordering =
      pick("SIEVE_IB_RELAXED_ORDERING", s.ib_relaxed_ordering, true, "NCCL_IB_PCI_RELAXED_ORDERING", 0, 2, 1) != 0;
  o->ib_adaptive_routing = static_cast<int>(
      pick("SIEVE_IB_ADAPTIVE_ROUTING", s.ib_adaptive_routing, true, "NCCL_IB_ADAPTIVE_ROUTING", 0, 1, -1));
  o->ib_ar_threshold = pick("SIEVE_IB_AR_THRESHOLD", static_cast<int64_t>(s.ib_ar_threshold), false,
                            "NCCL_IB_AR_THRESHOLD", 0, int64_t(1) << 31, static_cast<int64_t>(s.ib_ar_threshold));
  o->ib_pkey_index = static_cast<int>(pick("SIEVE_IB_PKEY", s.ib_pkey, true, "NCCL_IB_PKEY", 0, 65535, 0));
  return out;
}

}  // namespace sieve::plugin
