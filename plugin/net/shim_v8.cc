// SPDX-License-Identifier: Apache-2.0
// ncclNetPlugin_v8 (NCCL 2.20 - 2.23): int sizes, no context. A table over net_plugin.h.
#include "plugin/net/abi/net_v8.h"
#include "plugin/net/net_plugin.h"
#include "plugin/net/shim_properties.h"

namespace sieve::plugin {
namespace {

using namespace abi;

ncclResult_t get_properties(int dev, ncclNetProperties_v8_t* props) {
  DeviceProperties p;
  ncclResult_t r = net_properties(dev, &p);
  if (r != ncclSuccess) return r;
  *props = ncclNetProperties_v8_t{};
  props->name = const_cast<char*>(p.name);
  props->pciPath = const_cast<char*>(p.pci_path);
  props->guid = p.guid;
  props->ptrSupport = p.ptr_support;
  props->regIsGlobal = p.reg_is_global;
  props->speed = p.speed_mbps;
  props->port = p.port;
  props->latency = 0;
  props->maxComms = p.max_comms;
  props->maxRecvs = p.max_recvs;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
  return ncclSuccess;
}

ncclResult_t listen(int dev, void* handle, void** listen_comm) { return net_listen(nullptr, dev, handle, listen_comm); }

ncclResult_t connect(int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return net_connect(nullptr, dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, send_comm);
}

ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return net_accept(listen_comm, recv_comm);
}

ncclResult_t isend(void* send_comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) return ncclInvalidArgument;
  return net_isend(send_comm, data, static_cast<size_t>(size), tag, mhandle, request);
}

ncclResult_t irecv(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  if (n != 1 || !sizes || sizes[0] < 0) return net_irecv(recv_comm, n, data, nullptr, tags, mhandles, request);
  size_t size = static_cast<size_t>(sizes[0]);
  return net_irecv(recv_comm, n, data, &size, tags, mhandles, request);
}

}  // namespace
}  // namespace sieve::plugin

extern "C" __attribute__((visibility("default"))) const sieve::abi::ncclNet_v8_t ncclNetPlugin_v8 = {
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
    sieve::plugin::isend,
    sieve::plugin::irecv,
    sieve::plugin::net_iflush,
    sieve::plugin::shim_test,
    sieve::plugin::net_close_send,
    sieve::plugin::net_close_recv,
    sieve::plugin::net_close_listen,
    nullptr,  // getDeviceMr: no device offload
    nullptr,  // irecvConsumed: no device offload
};
