#include "net/ib/device_context.h"

#include <cerrno>

#include "net/socket.h"

namespace sieve::net::ib {

Status DeviceContext::open(const VerbsLibrary& verbs, ibv_device* device, const std::string& name,
                           std::shared_ptr<DeviceContext>* out) {
  std::shared_ptr<DeviceContext> d(new DeviceContext(verbs, name));
  d->context_ = verbs.open_device(device);
  if (!d->context_) return error(Code::SystemError, "ibv_open_device(" + name + ") failed: " + errno_text(errno));
  d->pd_ = verbs.alloc_pd(d->context_);
  if (!d->pd_) return error(Code::SystemError, "ibv_alloc_pd on " + name + " failed: " + errno_text(errno));
  *out = std::move(d);
  return Status::ok();
}

DeviceContext::~DeviceContext() {
  if (pd_) verbs_.dealloc_pd(pd_);
  if (context_) verbs_.close_device(context_);
}

}  // namespace sieve::net::ib
