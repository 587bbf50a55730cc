// One opened RDMA device and its protection domain, shared by every comm and registration on it;
// the last holder (the transport, a comm, or a registration outliving its comm) closes it.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>

#include "net/ib/verbs_library.h"
#include "net/status.h"

namespace sieve::net::ib {

class DeviceContext {
 public:
  static Status open(const VerbsLibrary& verbs, ibv_device* device, const std::string& name,
                     std::shared_ptr<DeviceContext>* out);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  const VerbsLibrary& verbs() const { return verbs_; }
  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  const std::string& name() const { return name_; }

 private:
  DeviceContext(const VerbsLibrary& verbs, std::string name) : verbs_(verbs), name_(std::move(name)) {}
  const VerbsLibrary& verbs_;
  const std::string name_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

}  // namespace sieve::net::ib
