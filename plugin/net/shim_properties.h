// SPDX-License-Identifier: Apache-2.0
// Property filling and test shared by the v9-v12 shims (their property structs share a prefix).
#pragma once

#include "plugin/net/abi/net_v11.h"
#include "plugin/net/abi/net_v12.h"
#include "plugin/net/abi/net_v9.h"
#include "plugin/net/net_plugin.h"

namespace sieve::plugin {

template <typename Props> ncclResult_t fill_common_v9(int dev, Props* props) {
  DeviceProperties p;
  ncclResult_t r = net_properties(dev, &p);
  if (r != abi::ncclSuccess) return r;
  *props = Props{};
  props->name = const_cast<char*>(p.name);
  props->pciPath = const_cast<char*>(p.pci_path);
  props->guid = p.guid;
  props->ptrSupport = p.ptr_support;
  props->regIsGlobal = p.reg_is_global;
  props->forceFlush = 0;
  props->speed = p.speed_mbps;
  props->port = p.port;
  props->latency = 0;
  props->maxComms = p.max_comms;
  props->maxRecvs = p.max_recvs;
  props->netDeviceType = abi::NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = p.max_p2p_bytes;
  props->maxCollBytes = p.max_coll_bytes;
  return abi::ncclSuccess;
}

inline ncclResult_t fill_properties_v9(int dev, abi::ncclNetProperties_v9_t* props) {
  return fill_common_v9(dev, props);
}

inline ncclResult_t fill_properties_v11(int dev, abi::ncclNetProperties_v11_t* props) {
  ncclResult_t r = fill_common_v9(dev, props);
  if (r == abi::ncclSuccess) props->maxMultiRequestSize = 1;
  return r;
}

inline ncclResult_t fill_properties_v12(int dev, abi::ncclNetProperties_v12_t* props) {
  ncclResult_t r = fill_common_v9(dev, props);
  if (r == abi::ncclSuccess) {
    props->maxMultiRequestSize = 1;
    props->railId = abi::NCCL_NET_ID_UNDEF;  // no rail/plane knowledge: NCCL then ignores both
    props->planeId = abi::NCCL_NET_ID_UNDEF;
  }
  return r;
}

// test() reports int sizes in every version.
inline ncclResult_t shim_test(void* request, int* done, int* sizes) {
  size_t size = 0;
  ncclResult_t r = net_test(request, done, &size);
  if (r == abi::ncclSuccess && done && *done && sizes) *sizes = size > 0x7fffffff ? 0x7fffffff : static_cast<int>(size);
  return r;
}

}  // namespace sieve::plugin
