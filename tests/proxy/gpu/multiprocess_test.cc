// Several NCCL "nodes" on one GPU through the collective proxy: two sieve-proxy-rank processes with
// distinct NCCL_HOSTIDs, all traffic through the Sieve net plugin (NCCL_NET=Sieve), all-reducing
// through the interposed ncclAllReduce; every dtype and op compacted must equal the dense result, and
// learned masks must compact, catch a violation and fall back. Skips, saying why, without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/proxy/gpu/gpu_gate.h"
#include "tools/common/subprocess.h"

#ifndef SIEVE_PROXY_RANK
#error "SIEVE_PROXY_RANK must name the sieve-proxy-rank executable"
#endif
#ifndef SIEVE_PLUGIN_LIBRARY
#error "SIEVE_PLUGIN_LIBRARY must name libnccl-net-sieve.so"
#endif

namespace {


// Runs `nranks` ranks of `mode` to completion (bounded); returns each rank's transcript and status.
void run_ranks(const std::string& mode, int nranks, const std::vector<std::string>& extra_env, int timeout_s) {
  const std::string id_file = ::testing::TempDir() + "sieve-proxy-id-" + mode + "-" + std::to_string(getpid());
  unlink(id_file.c_str());
  std::vector<std::unique_ptr<sieve::tools::Child>> ranks;
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> env = {
        "NCCL_HOSTID=sieve-proxy-test-" + std::to_string(r),  // distinct "hosts": traffic goes to the net plugin
        std::string("NCCL_NET_PLUGIN=") + SIEVE_PLUGIN_LIBRARY,
        "NCCL_NET=Sieve",  // never fall back silently to NCCL's own socket transport
        "NCCL_MNNVL_ENABLE=0",
        "NCCL_SOCKET_IFNAME=lo",
        "SIEVE_SOCKET_IFNAME=lo",
        "NCCL_DEBUG=WARN",
    };
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::string error;
    auto child = sieve::tools::Child::spawn({SIEVE_PROXY_RANK, "--rank", std::to_string(r), "--nranks",
                                             std::to_string(nranks), "--id-file", id_file, "--library",
                                             SIEVE_PLUGIN_LIBRARY, mode},
                                            env, &error);
    ASSERT_TRUE(child) << error;
    ranks.push_back(std::move(child));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (int r = 0; r < nranks; ++r) {
    std::string line;
    while (std::chrono::steady_clock::now() < deadline && ranks[r]->read_line(&line, 1000)) {
    }
    int status = -1;
    const int left_ms = int(std::max<int64_t>(1000, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                        deadline - std::chrono::steady_clock::now()).count()));
    ASSERT_TRUE(ranks[r]->wait_exit(&status, left_ms)) << "rank " << r << " still running after " << timeout_s << " s";
    std::printf("--- rank %d (%s) ---\n%s", r, mode.c_str(), ranks[r]->transcript().c_str());
    EXPECT_EQ(status, 0) << "rank " << r << " failed; its stderr is above";
  }
  unlink(id_file.c_str());
}

TEST(ProxyMultiProcessTest, CompactedAllReduceEqualsDenseForEveryTypeAndOp) {
  SIEVE_REQUIRE_GPU();
  run_ranks("check", 2, {"SIEVE_PROXY_MIN_COUNT=1"}, 110);
}

TEST(ProxyMultiProcessTest, ReduceScatterAndAllGatherCompactExactly) {
  SIEVE_REQUIRE_GPU();
  for (int n : {2, 4}) run_ranks("sharded", n, {"SIEVE_PROXY_MIN_COUNT=1"}, 110);
}

TEST(ProxyMultiProcessTest, UnionMasksCompactExactly) {
  SIEVE_REQUIRE_GPU();
  run_ranks("union", 2, {}, 110);
}

TEST(ProxyMultiProcessTest, AGraphCapturingACompactedAllReduceReplays) {
  SIEVE_REQUIRE_GPU();
  run_ranks("capture", 2, {}, 110);
}

TEST(ProxyMultiProcessTest, LearnedMasksCompactCatchViolationsAndFallBack) {
  SIEVE_REQUIRE_GPU();
  run_ranks("learned", 2, {"SIEVE_TRACK=1", "SIEVE_TRACK_STABLE=2", "SIEVE_TRACK_LAG=2"}, 110);
}

}  // namespace
