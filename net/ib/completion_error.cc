// SPDX-License-Identifier: Apache-2.0
#include "net/ib/completion_error.h"

#include <arpa/inet.h>

#include <cmath>
#include <cstdio>

namespace sieve::net::ib {

std::string gid_text(const ibv_gid& gid) {
  char buffer[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, gid.raw, buffer, sizeof(buffer));
  return buffer;
}

std::string completion_hint(ibv_wc_status status, const RetryBudget& retry) {
  switch (status) {
    case IBV_WC_LOC_PROT_ERR:
      // NCCL's hint too: the NIC's DMA to GPU memory is refused on its way, not by the verbs keys.
      return "a local protection error on GPU memory usually means PCIe ACS or the IOMMU blocks the NIC's "
             "peer-to-peer access to the GPU: disable ACS on the PCIe switches between them (or set the IOMMU "
             "to passthrough) as the vendor documents";
    case IBV_WC_RETRY_EXC_ERR: {
      const double seconds = (retry.retry_count + 1) * 4.096e-6 * std::ldexp(1.0, retry.timeout);
      const double shown = seconds >= 1 ? seconds : seconds >= 1e-3 ? seconds * 1e3 : seconds * 1e6;
      const char* unit = seconds >= 1 ? "s" : seconds >= 1e-3 ? "ms" : "us";
      char text[320];
      std::snprintf(text, sizeof text,
                    "the peer or the path to it acknowledged nothing for SIEVE_IB_RETRY_CNT=%d + 1 tries of "
                    "SIEVE_IB_TIMEOUT=%d (4.096 us x 2^%d each, about %.3g %s in all): check the peer node and the "
                    "fabric between them; raise SIEVE_IB_TIMEOUT only where links take longer than that to recover",
                    retry.retry_count, retry.timeout, retry.timeout, shown, unit);
      return text;
    }
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "the peer had no receive posted for longer than its RNR retries allow (a peer that stopped "
             "progressing its comms)";
    case IBV_WC_REM_ACCESS_ERR:
      return "the peer refused access to its buffer (a registration released while still in use, or a key "
             "from another comm)";
    default: return "";
  }
}

std::string describe_completion_error(const ibv_wc& wc, const char* status_text,
                                      const CompletionErrorContext& context) {
  std::string line = std::string(status_text) + " (status " + std::to_string(static_cast<int>(wc.status)) +
                     ") on queue pair " + std::to_string(wc.qp_num) + " to " + context.peer + " (" + context.work +
                     " on " + context.port;
  if (context.remote_qpn) line += ", remote queue pair " + std::to_string(context.remote_qpn);
  line += ", local GID " + gid_text(context.local_gid) + ", remote GID " + gid_text(context.remote_gid) +
          ", vendor error " + std::to_string(wc.vendor_err) + ")";
  const std::string hint = completion_hint(wc.status, context.retry);
  if (!hint.empty()) line += "; hint: " + hint;
  return line;
}

}  // namespace sieve::net::ib
