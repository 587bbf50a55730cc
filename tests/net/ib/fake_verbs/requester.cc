// SPDX-License-Identifier: Apache-2.0
// The requester end of an RC connection: a QP's first work in RTS opens a stream to the remote
// port's endpoint, says Hello (who it is, which QP it wants, its sq_psn, its path attributes) and
// streams its work requests; answers complete them in order. A port that is down sends nothing and
// its requests run into the retry budget (retry_while_port_down).
#include <errno.h>

#include <algorithm>

#include "tests/net/ib/fake_verbs/endpoint.h"
#include "tests/net/ib/fake_verbs/engine.h"
#include "tests/net/ib/fake_verbs/rc_protocol.h"
#include "tests/net/ib/fake_verbs/violation.h"

namespace sieve::fake_verbs {

void Engine::open_requester(Qp* qp) {
  auto conn = std::make_unique<Connection>();
  conn->role = Connection::Role::kRequester;
  conn->qp = qp;
  if (qp->device()->spec.link != LinkLayer::kInfiniband) {
    GidForm form;
    NodeAddress node;
    decode_gid(qp->attrs.ah.grh.dgid, &form, &node);  // checked at RTR
    conn->endpoint = roce_endpoint_name(node);
  } else {
    // The subnet's switches deliver by DLID. A packet for another subnet reaches its router only
    // when the DLID is a FLID, which the router maps to the destination port's LID there; any
    // other DLID names a port of this subnet (or none), and the GRH-checking responder refuses it.
    const QpAttrs& a = qp->attrs;
    const uint16_t flid = a.ah.is_global ? gid_flid(a.ah.grh.dgid) : 0;
    const bool routed = flid != 0 && flid == a.ah.dlid &&
                        (a.ah.grh.dgid.raw[6] << 8 | a.ah.grh.dgid.raw[7]) !=
                            static_cast<int>(qp->device()->spec.subnet_prefix & 0xffff);
    conn->endpoint = ib_endpoint_name(routed ? static_cast<uint16_t>(0xc000 - flid) : a.ah.dlid);
  }
  qp->requester = conn.get();
  connections_.push_back(std::move(conn));
}

void Engine::transmit(Qp* qp) {
  if (qp->state != IBV_QPS_RTS || qp->sq.empty()) return;
  if (qp->peer_gone) {
    fail_head(qp, IBV_WC_RETRY_EXC_ERR);
    return;
  }
  if (qp->device()->fatal) return;  // the device is dead: nothing moves, nothing completes
  if (!qp->port()->active) {
    retry_while_port_down(qp);
    return;
  }
  bool queued_work = false;
  for (const SendWr& wr : qp->sq) queued_work |= wr.stage == SendWr::Stage::kQueued;
  if (!queued_work) return;
  if (qp->requester == nullptr) open_requester(qp);
  Connection* conn = qp->requester;
  if (!conn->connected) {
    int error = connect_endpoint(conn->endpoint, &conn->fd);
    if (error == EAGAIN) return;  // backlog full: the loop retries shortly
    if (error != 0) {
      requester_lost(conn);  // nobody listens there any more: the peer is gone
      return;
    }
    conn->connected = true;
    const Device* device = qp->device();
    const Port* port = qp->port();
    const QpAttrs& a = qp->attrs;
    Hello hello;
    hello.pid = port->node.pid;
    hello.device_index = port->node.device_index;
    hello.link = static_cast<uint32_t>(device->spec.link);
    hello.lid = port->lid;
    hello.gid_type = port->gid_types[a.ah.grh.sgid_index < port->gid_count ? a.ah.grh.sgid_index : 0];
    hello.qpn = qp->qpn();
    hello.dest_qpn = a.dest_qp_num;
    hello.sq_psn = a.sq_psn;
    hello.subnet_prefix = device->spec.subnet_prefix;
    hello.is_global = a.ah.is_global;
    hello.pkey = device->spec.pkeys[a.pkey_index];
    hello.rnr_retry = a.rnr_retry;
    hello.dlid = a.ah.dlid;
    hello.flid = port->flid;
    MsgHeader header;
    header.type = static_cast<uint32_t>(MsgType::kHello);
    header.seq = qp->sq.front().seq;
    header.length = sizeof(hello);
    conn->queue_message(header, &hello, sizeof(hello));
  }
  for (SendWr& wr : qp->sq) {
    if (wr.stage == SendWr::Stage::kDone) break;  // a request that failed locally: nothing after it goes
    if (wr.stage == SendWr::Stage::kSent) continue;
    MsgHeader header;
    header.type = static_cast<uint32_t>(request_type(wr.opcode));
    header.seq = wr.seq;
    header.remote_addr = wr.remote_addr;
    header.rkey = wr.rkey;
    header.length = wr.length;
    header.imm = wr.imm;
    conn->queue_message(header);
    if (wr.opcode != IBV_WR_RDMA_READ) {
      if (wr.inline_copy) {
        conn->queue_reference(wr.inline_copy->data(), wr.inline_copy->size(), wr.inline_copy);
      } else {
        for (const Piece& piece : wr.pieces) conn->queue_reference(piece.host, piece.length, nullptr);
      }
    }
    wr.stage = SendWr::Stage::kSent;
  }
}

void Engine::requester_lost(Connection* conn) {
  Qp* qp = conn->qp;
  close_connection(conn);
  if (qp->state != IBV_QPS_RTS) return;
  if (qp->sq.empty()) {
    qp->peer_gone = true;  // nothing outstanding: we learn of it with the next request, as hardware would
  } else {
    fail_head(qp, IBV_WC_RETRY_EXC_ERR);
  }
}

void Engine::pump_requester(Connection* conn) {
  for (int messages = 0; messages < kMessagesPerTurn && !conn->dead; ++messages) {
    if (!conn->header_taken) {
      IoResult result = conn->read_header();
      if (result == IoResult::kClosed) return requester_lost(conn);
      if (result == IoResult::kWouldBlock) return;
      conn->header_taken = true;
      Qp* qp = conn->qp;
      SendWr* head = nullptr;
      for (SendWr& wr : qp->sq) {
        if (wr.stage == SendWr::Stage::kSent) {
          head = &wr;
          break;
        }
      }
      if (head == nullptr || head->seq != conn->header.seq) internal_error("a response matches no request");
      MsgType type = static_cast<MsgType>(conn->header.type);
      if (type == MsgType::kReadResponse) {
        conn->expect_payload(conn->header.length, head->pieces);
      } else if (type == MsgType::kNak) {
        if (conn->header.length > kMaxTextPayload) internal_error("oversized NAK text");
        conn->small.assign(conn->header.length, 0);
        conn->expect_payload(conn->header.length, {{conn->small.data(), conn->small.size()}});
      } else if (type != MsgType::kAck) {
        internal_error("unexpected message at a requester");
      }
    }
    IoResult result = conn->read_payload(kIoBudget);
    if (result == IoResult::kClosed) return requester_lost(conn);
    if (result == IoResult::kWouldBlock) return;
    on_response(conn);
    if (!conn->dead) conn->reset_input();
  }
}

void Engine::on_response(Connection* conn) {
  Qp* qp = conn->qp;
  SendWr* head = nullptr;
  for (SendWr& wr : qp->sq) {
    if (wr.stage == SendWr::Stage::kSent) {
      head = &wr;
      break;
    }
  }
  head->stage = SendWr::Stage::kDone;
  if (static_cast<MsgType>(conn->header.type) == MsgType::kNak) {
    std::string text(conn->small.begin(), conn->small.end());
    if (!text.empty()) violation("%s", text.c_str());
    head->status = static_cast<ibv_wc_status>(conn->header.status);
  }
  complete_sends(qp);
}

// The port is down: nothing leaves it, and the oldest request not yet answered is retried until
// the QP's retry budget (timeout, retry_cnt) runs out, counted from when it was posted or the port
// went down, whichever came later. Then it completes with IBV_WC_RETRY_EXC_ERR and the QP goes to
// ERR, as hardware would after losing the link; if the port comes back first, nothing was lost.
void Engine::retry_while_port_down(Qp* qp) {
  const SendWr& head = qp->sq.front();
  if (head.stage == SendWr::Stage::kDone) return;
  const Clock::duration budget = transport_retry_budget(qp->attrs.timeout, qp->attrs.retry_cnt);
  if (budget == Clock::duration::max()) return;
  const Clock::time_point deadline = std::max(head.posted_at, qp->port()->down_since) + budget;
  if (Clock::now() >= deadline) {
    fail_head(qp, IBV_WC_RETRY_EXC_ERR);
    return;
  }
  wake_at(deadline);
}

}  // namespace sieve::fake_verbs
