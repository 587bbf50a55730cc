// SPDX-License-Identifier: Apache-2.0
// ncclNetPlugin_v9 (NCCL 2.24 - 2.25): size_t sizes, virtual-device properties. A table over net_plugin.h.
#include "plugin/net/abi/net_v9.h"
#include "plugin/net/net_plugin.h"
#include "plugin/net/shim_properties.h"

namespace sieve::plugin {
namespace {

using namespace abi;

ncclResult_t get_properties(int dev, ncclNetProperties_v9_t* props) { return fill_properties_v9(dev, props); }

ncclResult_t listen(int dev, void* handle, void** listen_comm) { return net_listen(nullptr, dev, handle, listen_comm); }

ncclResult_t connect(int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return net_connect(nullptr, dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, send_comm);
}

ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return net_accept(listen_comm, recv_comm);
}

ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  return net_irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

}  // namespace
}  // namespace sieve::plugin

extern "C" __attribute__((visibility("default"))) const sieve::abi::ncclNet_v9_t ncclNetPlugin_v9 = {
    sieve::plugin::kPluginName,
    sieve::plugin::net_init,
    sieve::plugin::net_devices,
    sieve::plugin::get_properties,
    sieve::plugin::listen,
    sieve::plugin::connect,
    sieve::plugin::accept,
    sieve::plugin::net_reg_mr,
    sieve::plugin::net_reg_mr_dmabuf,
    sieve::plugin::net_dereg_mr,
    sieve::plugin::net_isend,
    sieve::plugin::irecv,
    sieve::plugin::net_iflush,
    sieve::plugin::shim_test,
    sieve::plugin::net_close_send,
    sieve::plugin::net_close_recv,
    sieve::plugin::net_close_listen,
    nullptr,  // getDeviceMr: no device offload
    nullptr,  // irecvConsumed: no device offload
    nullptr,  // makeVDevice: no NIC fusion
};
