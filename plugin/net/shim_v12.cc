// SPDX-License-Identifier: Apache-2.0
// ncclNetPlugin_v12 (added in NCCL 2.30, which tries it first; 2.28 stops at v11): v11 with wider
// virtual-NIC properties and rail/plane ids. Every entry but getProperties is v11's (the signatures
// did not change).
#include "plugin/net/abi/net_v12.h"
#include "plugin/net/shim_properties.h"
#include "plugin/net/shim_v11.h"

namespace sieve::plugin::v12 {

ncclResult_t get_properties(int dev, abi::ncclNetProperties_v12_t* props) { return fill_properties_v12(dev, props); }

}  // namespace sieve::plugin::v12

extern "C" __attribute__((visibility("default"))) const sieve::abi::ncclNet_v12_t ncclNetPlugin_v12 = {
    sieve::plugin::kPluginName,
    sieve::plugin::v11::init,
    sieve::plugin::net_devices,
    sieve::plugin::v12::get_properties,
    sieve::plugin::net_listen,
    sieve::plugin::v11::connect,
    sieve::plugin::v11::accept,
    sieve::plugin::net_reg_mr,
    sieve::plugin::net_reg_mr_dmabuf,
    sieve::plugin::net_dereg_mr,
    sieve::plugin::v11::isend,
    sieve::plugin::v11::irecv,
    sieve::plugin::net_iflush,
    sieve::plugin::shim_test,
    sieve::plugin::net_close_send,
    sieve::plugin::net_close_recv,
    sieve::plugin::net_close_listen,
    nullptr,  // getDeviceMr: no device offload
    nullptr,  // irecvConsumed: no device offload
    nullptr,  // makeVDevice: no NIC fusion
    sieve::plugin::net_finalize,
    sieve::plugin::v11::set_net_attr,
};
