// SPDX-License-Identifier: Apache-2.0
// What a failed work completion says (completion_error.h) and how a port's rate is read: pure
// functions, no device.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "net/ib/completion_error.h"
#include "net/ib/ib_devices.h"

namespace sieve::net::ib {
namespace {

ibv_gid gid_of(const char* text) {
  ibv_gid gid{};
  EXPECT_EQ(inet_pton(AF_INET6, text, gid.raw), 1) << text;
  return gid;
}

CompletionErrorContext context() {
  CompletionErrorContext c;
  c.work = "RDMA write";
  c.peer = "10.0.0.2:40000";
  c.port = "mlx5_0:1";
  c.local_gid = gid_of("fe80::1");
  c.remote_gid = gid_of("::ffff:10.0.0.2");
  c.remote_qpn = 77;
  return c;
}

ibv_wc failed(ibv_wc_status status) {
  ibv_wc wc{};
  wc.status = status;
  wc.qp_num = 0x1234;
  wc.vendor_err = 0x81;
  return wc;
}

// What NCCL's message carries: numeric status and its text, both queue pairs, both GIDs, the port,
// the vendor's code.
TEST(CompletionError, CarriesTheStatusBothQueuePairsAndBothGids) {
  const std::string line = describe_completion_error(failed(IBV_WC_REM_OP_ERR), "remote operation error", context());
  for (const char* part :
       {"remote operation error (status 11)", "queue pair 4660 to 10.0.0.2:40000", "RDMA write on mlx5_0:1",
        "remote queue pair 77", "local GID fe80::1", "remote GID ::ffff:10.0.0.2", "vendor error 129"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " missing from: " << line;
  EXPECT_EQ(line.find("hint"), std::string::npos) << line;
}

// Retry-exceeded: the peer or the path stopped acknowledging; the hint names the budget in force.
TEST(CompletionError, RetryExceededNamesTheBudgetAndItsVariables) {
  CompletionErrorContext c = context();
  c.retry.timeout = 20;
  c.retry.retry_count = 7;
  const std::string line =
      describe_completion_error(failed(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded", c);
  for (const char* part : {"(status 12)", "hint:", "SIEVE_IB_RETRY_CNT=7", "SIEVE_IB_TIMEOUT=20", "about 34.4 s"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " missing from: " << line;
}

// A local protection error on GPU memory is, in practice, PCIe ACS or the IOMMU (NCCL's hint).
TEST(CompletionError, LocalProtectionErrorsPointAtAcsAndTheIommu) {
  const std::string line = describe_completion_error(failed(IBV_WC_LOC_PROT_ERR), "local protection error", context());
  EXPECT_NE(line.find("(status 4)"), std::string::npos) << line;
  EXPECT_NE(line.find("ACS"), std::string::npos) << line;
  EXPECT_NE(line.find("IOMMU"), std::string::npos) << line;
}

// XDR (200 Gbit/s a lane) exists only as bit 8 of active_speed_ex; NCCL reads it from there.
TEST(PortSpeed, XdrIsBitEightOfTheExtendedSpeed) {
  EXPECT_EQ(port_speed_mbps(0x100, 2), 800000);  // 4x XDR
  EXPECT_EQ(port_speed_mbps(0x80, 2), 400000);   // 4x NDR
  EXPECT_EQ(port_speed_mbps(0x20, 1), 25000);    // 1x EDR
  EXPECT_EQ(port_speed_mbps(0x200, 2), 0);       // beyond what is known: unknown, not a guess
  EXPECT_EQ(port_speed_mbps(0, 2), 0);
}

}  // namespace
}  // namespace sieve::net::ib
