// SPDX-License-Identifier: Apache-2.0
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

#include "tests/plugin/proxy/gpu/gpu_gate.h"
#include "tools/common/install_layout.h"
#include "tools/common/subprocess.h"

namespace {

// sieve-proxy-rank and the library, found from this test's own directory, so the same binary runs
// in the build tree (tests/plugin/proxy/gpu/ beside tools/gpu/ and plugin/) and in the GPU kit (bin/ beside
// lib/) with no build-machine path compiled in.
std::string beside_this_test(const std::vector<std::string>& relative_candidates) {
  const std::string dir = sieve::tools::executable_dir();
  for (const std::string& candidate : relative_candidates) {
    const std::string path = dir + "/" + candidate;
    if (access(path.c_str(), R_OK) == 0) return path;
  }
  return dir + "/" + relative_candidates.front();  // the error then names the first place looked
}

const std::string& proxy_rank_program() {
  static const std::string path = beside_this_test({"sieve-proxy-rank", "../../../../tools/gpu/sieve-proxy-rank"});
  return path;
}

const std::string& plugin_library() {
  static const std::string path =
      beside_this_test({"../lib/libnccl-net-sieve.so", "../../../../plugin/libnccl-net-sieve.so"});
  return path;
}

// Runs `nranks` ranks of `mode` to completion (bounded); returns each rank's transcript and status.
void run_ranks(const std::string& mode, int nranks, const std::vector<std::string>& extra_env, int timeout_s) {
  const std::string id_file = ::testing::TempDir() + "sieve-proxy-id-" + mode + "-" + std::to_string(getpid());
  unlink(id_file.c_str());
  std::vector<std::unique_ptr<sieve::tools::Child>> ranks;
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> env = {
        "NCCL_HOSTID=sieve-proxy-test-" + std::to_string(r),  // distinct "hosts": traffic goes to the net plugin
        "NCCL_NET_PLUGIN=" + plugin_library(),
        "NCCL_NET=Sieve",  // never fall back silently to NCCL's own socket transport
        "NCCL_MNNVL_ENABLE=0",
        "NCCL_SOCKET_IFNAME=lo",
        "SIEVE_SOCKET_IFNAME=lo",
        "NCCL_DEBUG=WARN",
    };
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::string error;
    auto child =
        sieve::tools::Child::spawn({proxy_rank_program(), "--rank", std::to_string(r), "--nranks",
                                    std::to_string(nranks), "--id-file", id_file, "--library", plugin_library(), mode},
                                   env, &error);
    ASSERT_TRUE(child) << error;
    ranks.push_back(std::move(child));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (int r = 0; r < nranks; ++r) {
    std::string line;
    while (std::chrono::steady_clock::now() < deadline && ranks[r]->read_line(&line, 1000)) {}
    int status = -1;
    const int left_ms = int(std::max<int64_t>(
        1000,
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count()));
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
