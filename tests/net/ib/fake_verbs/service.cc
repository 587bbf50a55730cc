// SPDX-License-Identifier: Apache-2.0
// The RC engine's service thread and what both ends of a connection share: completions, QP errors,
// connection bookkeeping, and the loop that moves every connection's bytes.
//
// Every socket is non-blocking and the thread never waits on one peer, so a receiver that has no
// receive posted (RNR) only stalls its own connection. Timers (retries while a port is down, RNR
// retries) wake the loop at their deadline.
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/net/ib/fake_verbs/endpoint.h"
#include "tests/net/ib/fake_verbs/engine.h"
#include "tests/net/ib/fake_verbs/rc_protocol.h"
#include "tests/net/ib/fake_verbs/violation.h"

namespace sieve::fake_verbs {

// ---------------------------------------------------------------------------------------------
// Completions and QP errors

void Engine::push_completion(Cq* cq, const ibv_wc& wc, Qp* sq_qp, uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    if (cq->entries.size() < cq->capacity) {
      cq->entries.push_back(wc);
      cq->releases.push_back({sq_qp, seq + 1});
      return;
    }
  }
  violation("CQ overflow: CQ of %zu entries is full and a completion (wr_id %llu, QP %u) arrives", cq->capacity,
            static_cast<unsigned long long>(wc.wr_id), wc.qp_num);
  ibv_async_event event{};
  event.element.cq = &cq->shell.verbs;
  event.event_type = IBV_EVENT_CQ_ERR;
  post_async(cq->context, event);
}

void Engine::post_async(Context* context, const ibv_async_event& event) {
  if (context->async != nullptr) context->async->push(event);
}

void Engine::complete_sends(Qp* qp) {
  while (!qp->sq.empty() && qp->sq.front().stage == SendWr::Stage::kDone) {
    SendWr wr = std::move(qp->sq.front());
    qp->sq.pop_front();
    for (Mr* mr : wr.pinned) --mr->in_flight;
    if (wr.status == IBV_WC_SUCCESS && !wr.signaled) continue;
    ibv_wc wc{};
    wc.wr_id = wr.wr_id;
    wc.status = wr.status;
    wc.opcode = send_wc_opcode(wr.opcode);
    wc.byte_len = static_cast<uint32_t>(wr.length);
    wc.qp_num = qp->qpn();
    push_completion(qp->send_cq, wc, qp, wr.seq);
    if (wr.status != IBV_WC_SUCCESS) {
      enter_error(qp);
      return;
    }
  }
}

void Engine::fail_head(Qp* qp, ibv_wc_status status) {
  if (qp->sq.empty()) return;
  qp->sq.front().stage = SendWr::Stage::kDone;
  qp->sq.front().status = status;
  complete_sends(qp);
}

void Engine::enter_error(Qp* qp) {
  qp->state = IBV_QPS_ERR;
  qp->shell.verbs.state = IBV_QPS_ERR;
  drop_connections_of(qp, true);
  while (!qp->sq.empty()) {
    SendWr wr = std::move(qp->sq.front());
    qp->sq.pop_front();
    for (Mr* mr : wr.pinned) --mr->in_flight;
    ibv_wc wc{};
    wc.wr_id = wr.wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = send_wc_opcode(wr.opcode);
    wc.qp_num = qp->qpn();
    push_completion(qp->send_cq, wc, qp, wr.seq);
  }
  while (!qp->rq.empty()) {
    ibv_wc wc{};
    wc.wr_id = qp->rq.front().wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->qpn();
    qp->rq.pop_front();
    push_completion(qp->recv_cq, wc);
  }
}

void Engine::reset_qp(Qp* qp) {
  drop_connections_of(qp, false);
  for (SendWr& wr : qp->sq) {
    for (Mr* mr : wr.pinned) --mr->in_flight;
  }
  qp->sq.clear();
  qp->rq.clear();
  qp->next_seq = 0;
  qp->sq_released = 0;
  qp->peer_gone = false;
}

void Engine::drop_connections_of(Qp* qp, bool flush_responses) {
  for (auto& conn : connections_) {
    if (conn->dead || conn->qp != qp) continue;
    if (conn->role == Connection::Role::kResponder && flush_responses) {
      // Let the answers already queued (a NAK) reach the requester, then close.
      if (conn->target_mr != nullptr) --conn->target_mr->in_flight;
      conn->target_mr = nullptr;
      if (conn->has_recv) qp->rq.push_front(conn->recv);
      conn->has_recv = false;
      conn->closing = true;
    } else {
      close_connection(conn.get());
    }
  }
  qp->requester = nullptr;
}

void Engine::close_connection(Connection* conn) {
  if (conn->dead) return;
  if (conn->target_mr != nullptr) --conn->target_mr->in_flight;
  conn->target_mr = nullptr;
  // A message cut off mid-way leaves its receive posted, as a lost packet would.
  if (conn->has_recv && conn->qp != nullptr) conn->qp->rq.push_front(conn->recv);
  conn->has_recv = false;
  if (conn->role == Connection::Role::kRequester && conn->qp != nullptr && conn->qp->requester == conn) {
    conn->qp->requester = nullptr;
  }
  if (conn->fd >= 0) ::close(conn->fd);
  conn->fd = -1;
  conn->dead = true;
}

// ---------------------------------------------------------------------------------------------
// The loop (the two ends of a connection: requester.cc, responder.cc)

void Engine::progress() {
  std::vector<std::unique_ptr<Connection>> live;
  for (auto& conn : connections_) {
    if (!conn->dead) live.push_back(std::move(conn));
  }
  connections_.swap(live);
  for (auto& device : devices_) {
    for (auto& entry : device->qps) transmit(entry.second);
  }
  for (size_t i = 0; i < connections_.size(); ++i) {
    Connection* conn = connections_[i].get();
    if (conn->dead || cut_off(conn)) continue;
    if (conn->role == Connection::Role::kResponder && !conn->closing && input_blocked(conn)) {
      if (start_request(conn)) {
        conn->header_taken = true;
        pump_responder(conn);
      }
    }
    if (conn->dead || conn->fd < 0) continue;
    if (!conn->out.empty() && conn->flush(kIoBudget) == IoResult::kClosed) {
      if (conn->role == Connection::Role::kRequester) {
        requester_lost(conn);
      } else {
        close_connection(conn);
      }
      continue;
    }
    if (conn->closing && conn->out.empty()) close_connection(conn);
  }
}

void Engine::hold_writes(const uint8_t* address, bool hold) {
  auto found = std::find(held_.begin(), held_.end(), address);
  if (hold && found == held_.end()) held_.push_back(address);
  if (!hold && found != held_.end()) held_.erase(found);
  wake();  // a held write retries in progress()
}

bool Engine::write_held(const uint8_t* host, uint64_t length) const {
  for (const uint8_t* address : held_)
    if (address >= host && address < host + length) return true;
  return false;
}

// A connection through a port that is down, or of a device that had a fatal error, carries
// nothing either way: its packets are lost until the port comes back.
bool Engine::cut_off(const Connection* conn) const {
  if (conn->role == Connection::Role::kRequester) return conn->qp->device()->fatal || !conn->qp->port()->active;
  return conn->device->fatal || !conn->port->active;
}

void Engine::wake_at(Clock::time_point when) { next_deadline_ = std::min(next_deadline_, when); }

void Engine::service_loop() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Device*, Port*>> listeners;
  std::vector<Connection*> polled;
  for (;;) {
    int timeout = -1;
    {
      std::lock_guard<std::mutex> lock(mu);
      next_deadline_ = Clock::time_point::max();
      progress();
      if (next_deadline_ != Clock::time_point::max()) {
        const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_deadline_ - Clock::now()).count();
        timeout = static_cast<int>(std::clamp<int64_t>(wait, 0, 1000));
      }
      fds.clear();
      listeners.clear();
      polled.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      for (auto& device : devices_) {
        for (Port& port : device->ports) {
          if (port.listen_fd < 0 || !port.active || device->fatal) continue;
          fds.push_back({port.listen_fd, POLLIN, 0});
          listeners.push_back({device.get(), &port});
        }
      }
      for (auto& conn : connections_) {
        if (conn->dead || cut_off(conn.get())) continue;
        if (conn->fd < 0) {
          timeout = timeout < 0 ? 1 : std::min(timeout, 1);  // a requester waiting for a full backlog to drain
          continue;
        }
        short events = 0;
        if (!conn->closing && !(conn->role == Connection::Role::kResponder && input_blocked(conn.get()))) {
          events |= POLLIN;
        }
        if (!conn->out.empty()) events |= POLLOUT;
        fds.push_back({conn->fd, events, 0});
        polled.push_back(conn.get());
      }
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) internal_error("poll failed");
    std::lock_guard<std::mutex> lock(mu);
    uint64_t wakes;
    while (::read(wake_fd_, &wakes, sizeof(wakes)) > 0) {}
    for (size_t i = 0; i < listeners.size(); ++i) {
      if (fds[1 + i].revents != 0) accept_on(listeners[i].first, listeners[i].second);
    }
    size_t first = 1 + listeners.size();
    for (size_t i = 0; i < polled.size(); ++i) {
      Connection* conn = polled[i];
      short revents = fds[first + i].revents;
      if (conn->dead || revents == 0) continue;
      if (revents & POLLOUT) {
        if (conn->flush(kIoBudget) == IoResult::kClosed) {
          if (conn->role == Connection::Role::kRequester) {
            requester_lost(conn);
          } else {
            close_connection(conn);
          }
          continue;
        }
      }
      if (!(revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (conn->role == Connection::Role::kRequester) {
        pump_requester(conn);
      } else if (conn->closing || input_blocked(conn)) {
        if (revents & (POLLHUP | POLLERR)) close_connection(conn);  // the requester went away meanwhile
      } else {
        pump_responder(conn);
      }
    }
  }
}

}  // namespace sieve::fake_verbs
