// SPDX-License-Identifier: Apache-2.0
#include "net/ib/device_context.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>

#include "net/log.h"
#include "net/socket.h"

namespace sieve::net::ib {

Status DeviceContext::open(const VerbsLibrary& verbs, ibv_device* device, const std::string& name,
                           std::shared_ptr<DeviceContext>* out) {
  std::shared_ptr<DeviceContext> d(new DeviceContext(verbs, name));
  d->context_ = verbs.open_device(device);
  if (!d->context_) return error(Code::kSystemError, "ibv_open_device(" + name + ") failed: " + errno_text(errno));
  // Events are read from the comms' progress, which must never block on an empty queue.
  const int fd = d->context_->async_fd;
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return error(Code::kSystemError,
                 "making the async event descriptor of " + name + " non-blocking failed: " + errno_text(errno));
  d->pd_ = verbs.alloc_pd(d->context_);
  if (!d->pd_) return error(Code::kSystemError, "ibv_alloc_pd on " + name + " failed: " + errno_text(errno));
  *out = std::move(d);
  return ok_status();
}

DeviceContext::~DeviceContext() {
  if (pd_) verbs_.dealloc_pd(pd_);
  if (context_) verbs_.close_device(context_);
}

bool DeviceContext::lost() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !fatal_.empty();
}

Status DeviceContext::health(const std::vector<const void*>& objects) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_read_) {
    next_read_ = now + kEventInterval;
    read_events();
  }
  if (!fatal_.empty()) return error(Code::kSystemError, fatal_);
  for (const void* object : objects) {
    auto broken = broken_.find(object);
    if (broken != broken_.end()) return error(Code::kSystemError, broken->second);
  }
  return ok_status();
}

void DeviceContext::forget(const void* object) {
  std::lock_guard<std::mutex> lock(mutex_);
  broken_.erase(object);
}

void DeviceContext::read_events() {
  for (;;) {
    pollfd p{context_->async_fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return;
    ibv_async_event event{};
    if (verbs_.get_async_event(context_, &event) != 0) return;  // EAGAIN: another reader took it
    handle(event);
    verbs_.ack_async_event(&event);
  }
}

void DeviceContext::handle(const ibv_async_event& event) {
  const char* what = verbs_.event_type_str(event.event_type);
  switch (event.event_type) {
    case IBV_EVENT_DEVICE_FATAL:
      if (fatal_.empty()) {
        fatal_ = "RDMA device " + name_ + " had a fatal error (" + what +
                 "): every connection on it is lost until the driver resets it";
        SIEVE_WARN("%s", fatal_.c_str());
      }
      return;
    case IBV_EVENT_PORT_ERR:
      // Not fatal (NCCL's rule too): each queue pair on the port retries for its whole budget and
      // only then completes in error, naming the work and the peer; a port back before that loses
      // nothing.
      SIEVE_WARN(
          "port %s:%d went down (%s): its queue pairs retry for SIEVE_IB_TIMEOUT x SIEVE_IB_RETRY_CNT, then "
          "fail with retry-exceeded unless the link is back",
          name_.c_str(), event.element.port_num, what);
      return;
    case IBV_EVENT_PORT_ACTIVE:
      SIEVE_INFO("port %s:%d is active again (%s)", name_.c_str(), event.element.port_num, what);
      return;
    case IBV_EVENT_CQ_ERR:
      broken_[event.element.cq] = "a completion queue on " + name_ + " failed (" + what + ")";
      SIEVE_WARN("%s", broken_[event.element.cq].c_str());
      return;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
      if (event.element.qp) {
        broken_[event.element.qp] =
            "queue pair " + std::to_string(event.element.qp->qp_num) + " on " + name_ + " failed (" + what + ")";
        SIEVE_WARN("%s", broken_[event.element.qp].c_str());
      }
      return;
    default:
      // Address changes, path migration, communication established, ...: nothing to fail.
      SIEVE_INFO("%s: %s", name_.c_str(), what);
      return;
  }
}

}  // namespace sieve::net::ib
