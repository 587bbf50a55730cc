// SPDX-License-Identifier: Apache-2.0
// Fuzzes what the verbs transport reads before any RDMA (net/ib/ib_setup.cc): the peer's set-up
// message from the authenticated bootstrap socket (queue pairs, PSNs, link layer, MTU, GID, service
// class, P_Key), and SIEVE_IB_HCA's port list. The first byte picks which. An accepted set-up
// message must re-encode to one that decodes the same.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "net/ib/ib_devices.h"
#include "net/ib/ib_setup.h"

using namespace sieve::net;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool setup = (data[0] & 1) == 0;
  ++data;
  --size;
  if (setup) {
    if (size < ib::kSetupBytes) return 0;
    std::vector<uint8_t> in(data, data + ib::kSetupBytes);  // exact size: reads past it are caught
    ib::SetupInfo info;
    if (!ib::decode_setup(in.data(), &info).ok()) return 0;
    if (info.qpn.empty() || info.qpn.size() > size_t(ib::kMaxQps) || info.psn.size() != info.qpn.size()) std::abort();
    uint8_t out[ib::kSetupBytes];
    ib::encode_setup(info, out);
    ib::SetupInfo again;
    if (!ib::decode_setup(out, &again).ok() || again.qpn != info.qpn || again.psn != info.psn ||
        again.mtu != info.mtu || again.lid != info.lid || again.pkey != info.pkey)
      std::abort();
    return 0;
  }
  ib::HcaSpec spec;
  const Status st = ib::parse_hca_spec(std::string(reinterpret_cast<const char*>(data), size), &spec);
  if (!st.ok() && st.message().empty()) std::abort();
  return 0;
}
