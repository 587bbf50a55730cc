// SPDX-License-Identifier: Apache-2.0
// sieve_transport_choice_probe: loads the built plugin as NCCL would, initialises it and prints what
// it chose, for transport_choice_test (which runs it under different environments, since the
// plugin reads its configuration once per process). The plugin's log lines go to stdout too.
//
//   INIT <ncclResult>                       then, on success:
//   DEVICE <name> PTR <ptrSupport> MAXP2P <maxP2pBytes> PORT <port> GUID <guid, hex>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "tools/nccl_emulator/plugin_loader.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
    return 2;
  }
  dup2(STDOUT_FILENO, STDERR_FILENO);  // the loader prints the plugin's log on stderr
  setvbuf(stdout, nullptr, _IOLBF, 0);
  sieve::tools::LoaderOptions options;
  options.log_level = 3;  // INFO: the line saying which transport and why
  std::string error;
  auto net = sieve::tools::NetPlugin::open(argv[1], options, &error);
  if (!net) {
    printf("OPEN %s\n", error.c_str());
    return 1;
  }
  const int result = net->init();
  printf("INIT %s\n", sieve::tools::result_name(result));
  if (result != sieve::tools::kNetSuccess) return 0;
  int ndev = 0;
  net->devices(&ndev);
  for (int dev = 0; dev < ndev; ++dev) {
    sieve::tools::NetDeviceInfo info;
    if (net->properties(dev, &info) != sieve::tools::kNetSuccess) continue;
    printf("DEVICE %s PTR %d MAXP2P %zu PORT %d GUID %llx GLOBAL %d\n", info.name.c_str(), info.ptr_support,
           info.max_p2p_bytes, info.port, static_cast<unsigned long long>(info.guid), info.reg_is_global);
  }
  net->finalize();
  return 0;
}
