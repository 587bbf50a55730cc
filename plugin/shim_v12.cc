// ncclNetPlugin_v12 (NCCL 2.29 - 2.30): v11 with wider virtual-NIC properties and rail/plane ids;
// NCCL 2.30 tries it first. Each context holds a reference on the shared process state.
#include "plugin/abi/net_v12.h"
#include "plugin/net_plugin.h"
#include "plugin/shim_properties.h"

namespace sieve::plugin {
namespace {

using namespace abi;

ncclResult_t init(void** ctx, uint64_t comm_id, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                  ncclProfilerCallback_t /*profiler*/) {
  return net_init_context(ctx, comm_id, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, logger);
}

ncclResult_t get_properties(int dev, ncclNetProperties_v12_t* props) { return fill_properties_v12(dev, props); }

ncclResult_t connect(void* ctx, int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return net_connect(ctx, dev, handle, send_comm);
}

ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return net_accept(listen_comm, recv_comm);
}

ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* /*phandle*/, void** request) {
  return net_isend(send_comm, data, size, tag, mhandle, request);
}

ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** /*phandles*/,
                   void** request) {
  return net_irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

ncclResult_t set_net_attr(void* ctx, ncclNetAttr_v12_t* attr) { return net_set_attr(ctx, attr); }

}  // namespace
}  // namespace sieve::plugin

extern "C" __attribute__((visibility("default"))) const sieve::abi::ncclNet_v12_t ncclNetPlugin_v12 = {
    sieve::plugin::kPluginName,
    sieve::plugin::init,
    sieve::plugin::net_devices,
    sieve::plugin::get_properties,
    sieve::plugin::net_listen,
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
    sieve::plugin::net_finalize,
    sieve::plugin::set_net_attr,
};
