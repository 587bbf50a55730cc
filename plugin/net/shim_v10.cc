// SPDX-License-Identifier: Apache-2.0
// ncclNetPlugin_v10 (NCCL 2.26 - 2.27): profiler callback, per-connection config, profiler handles.
#include "plugin/net/abi/net_v10.h"
#include "plugin/net/net_plugin.h"
#include "plugin/net/shim_properties.h"

namespace sieve::plugin {
namespace {

using namespace abi;

ncclResult_t init(ncclDebugLogger_t logger, ncclProfilerCallback_t /*profiler*/) { return net_init(logger); }

ncclResult_t get_properties(int dev, ncclNetProperties_v10_t* props) { return fill_properties_v9(dev, props); }

ncclResult_t listen(int dev, void* handle, void** listen_comm) { return net_listen(nullptr, dev, handle, listen_comm); }

ncclResult_t connect(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** send_comm,
                     ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return net_connect(nullptr, dev, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, send_comm);
}

ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return net_accept(listen_comm, recv_comm);
}

ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* /*phandle*/,
                   void** request) {
  return net_isend(send_comm, data, size, tag, mhandle, request);
}

ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** /*phandles*/,
                   void** request) {
  return net_irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

}  // namespace
}  // namespace sieve::plugin

extern "C" __attribute__((visibility("default"))) const sieve::abi::ncclNet_v10_t ncclNetPlugin_v10 = {
    sieve::plugin::kPluginName,
    sieve::plugin::init,
    sieve::plugin::net_devices,
    sieve::plugin::get_properties,
    sieve::plugin::listen,
    sieve::plugin::connect,
    sieve::plugin::accept,
    sieve::plugin::net_reg_mr,
    sieve::plugin::net_reg_mr_dmabuf,
    sieve::plugin::net_dereg_mr,
    sieve::plugin::isend,
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
