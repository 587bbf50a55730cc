// SPDX-License-Identifier: Apache-2.0
// ncclNetPlugin_v11 (NCCL 2.28 - 2.29; 2.30 adds v12): init once per communicator with a context,
// finalize, setNetAttr. Each context holds a reference on the shared process state.
#include "plugin/net/shim_v11.h"

#include "plugin/net/shim_properties.h"

namespace sieve::plugin::v11 {

using namespace abi;

ncclResult_t init(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logger,
                  ncclProfilerCallback_t /*profiler*/) {
  return net_init_context(ctx, comm_id, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, logger);
}

ncclResult_t get_properties(int dev, ncclNetProperties_v11_t* props) { return fill_properties_v11(dev, props); }

ncclResult_t connect(void* ctx, int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return net_connect(ctx, dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, send_comm);
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

ncclResult_t set_net_attr(void* ctx, ncclNetAttr_v11_t* attr) { return net_set_attr(ctx, attr); }

}  // namespace sieve::plugin::v11

extern "C" __attribute__((visibility("default"))) const sieve::abi::ncclNet_v11_t ncclNetPlugin_v11 = {
    sieve::plugin::kPluginName,
    sieve::plugin::v11::init,
    sieve::plugin::net_devices,
    sieve::plugin::v11::get_properties,
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
