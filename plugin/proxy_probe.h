// A hook between the two faces of the library: when NCCL initialises the net plugin, NCCL is
// loaded and the collective proxy (built only with CUDA) can check that it will see collectives.
// The proxy registers its check at load time; the net plugin runs it once. No dependency from the
// net plugin on the proxy.
#pragma once

namespace sieve::plugin {

using ProxyProbe = void (*)();
void register_proxy_probe(ProxyProbe probe);
// Runs the registered probe once per process (later calls do nothing).
void run_proxy_probe();
// True when this library was loaded through LD_PRELOAD (its path, or its file name, is listed there).
bool preloaded();

}  // namespace sieve::plugin
