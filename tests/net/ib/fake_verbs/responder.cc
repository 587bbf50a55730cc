// SPDX-License-Identifier: Apache-2.0
// The responder end of an RC connection: a port's endpoint accepts streams from requester QPs,
// checks each one's Hello against the target QP's RTR attributes (pairing, addresses, PSN, P_Key,
// routing between subnets), applies its requests to registered memory or posted receives, and
// answers in order. A receiver without a posted receive makes the sender wait (RNR) for as long as
// the sender's rnr_retry allows.
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tests/net/ib/fake_verbs/endpoint.h"
#include "tests/net/ib/fake_verbs/engine.h"
#include "tests/net/ib/fake_verbs/rc_protocol.h"
#include "tests/net/ib/fake_verbs/violation.h"

namespace sieve::fake_verbs {

namespace {

// IB spec 10.9.3: the low 15 bits name the partition; two limited members cannot talk.
bool pkeys_match(uint16_t a, uint16_t b) { return (a & 0x7fff) == (b & 0x7fff) && ((a | b) & 0x8000) != 0; }

}  // namespace

void Engine::accept_on(Device* device, Port* port) {
  for (;;) {
    int fd = ::accept4(port->listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    tune_endpoint_socket(fd);
    auto conn = std::make_unique<Connection>();
    conn->role = Connection::Role::kResponder;
    conn->fd = fd;
    conn->device = device;
    conn->port = port;
    conn->connected = true;
    connections_.push_back(std::move(conn));
  }
}

void Engine::nak(Connection* conn, ibv_wc_status status, const std::string& text, bool responder_to_error) {
  MsgHeader header;
  header.type = static_cast<uint32_t>(MsgType::kNak);
  header.status = status;
  header.seq = conn->header.seq;
  header.length = std::min<size_t>(text.size(), kMaxTextPayload);
  conn->queue_message(header, text.data(), header.length);
  conn->closing = true;
  Qp* qp = conn->qp;
  if (responder_to_error && qp != nullptr && qp->state != IBV_QPS_ERR) {
    ibv_async_event event{};
    event.element.qp = &qp->shell.verbs;
    event.event_type = status == IBV_WC_REM_ACCESS_ERR ? IBV_EVENT_QP_ACCESS_ERR : IBV_EVENT_QP_REQ_ERR;
    post_async(qp->context, event);
    enter_error(qp);
  }
}

bool Engine::check_hello(Connection* conn) {
  if (conn->hello_checked) return true;
  Qp* qp = conn->qp;
  if (qp->destroyed || qp->state == IBV_QPS_ERR) {
    nak(conn, IBV_WC_RETRY_EXC_ERR, "", false);  // a QP that is gone answers nothing: the requester times out
    return false;
  }
  if (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS) return false;  // not ready yet: the requester retries
  const Hello& hello = conn->hello;
  const Device* device = qp->device();
  const Port* port = qp->port();
  const QpAttrs& a = qp->attrs;
  const uint16_t my_pkey = device->spec.pkeys[a.pkey_index];
  const bool other_subnet =
      device->spec.link == LinkLayer::kInfiniband && hello.subnet_prefix != device->spec.subnet_prefix;
  char why[400] = "";
  if (hello.link != static_cast<uint32_t>(device->spec.link)) {
    std::snprintf(why, sizeof(why), "QP %u (%s) sends to QP %u on %s, whose link layer differs", hello.qpn,
                  hello.link == static_cast<uint32_t>(LinkLayer::kRoce) ? "RoCE" : "IB", qp->qpn(),
                  device->spec.name.c_str());
  } else if (qp->attrs.dest_qp_num != hello.qpn) {
    std::snprintf(why, sizeof(why), "QP pairing: QP %u sends to QP %u, but QP %u's RTR dest_qp_num is %u", hello.qpn,
                  qp->qpn(), qp->qpn(), qp->attrs.dest_qp_num);
  } else if (!pkeys_match(static_cast<uint16_t>(hello.pkey), my_pkey)) {
    std::snprintf(why, sizeof(why),
                  "P_Key mismatch: QP %u sends with P_Key 0x%04x, QP %u's is 0x%04x (the switch "
                  "drops every packet)",
                  hello.qpn, hello.pkey, qp->qpn(), my_pkey);
  } else if (other_subnet && (!hello.is_global || !a.ah.is_global)) {
    std::snprintf(why, sizeof(why),
                  "subnet mismatch: QP %u (subnet %016llx) and QP %u (subnet %016llx) are in "
                  "different subnets and QP %u has no GRH: no router forwards its packets",
                  hello.qpn, static_cast<unsigned long long>(hello.subnet_prefix), qp->qpn(),
                  static_cast<unsigned long long>(device->spec.subnet_prefix), hello.is_global ? qp->qpn() : hello.qpn);
  } else if (a.ah.is_global) {
    GidForm form;
    NodeAddress node;
    ibv_gid_type my_type = port->gid_types[a.ah.grh.sgid_index];
    bool names_requester =
        decode_gid(a.ah.grh.dgid, &form, &node) && node.pid == hello.pid && node.device_index == hello.device_index;
    if (!names_requester) {
      std::snprintf(why, sizeof(why), "GID mismatch: QP %u's RTR dgid %s is not the GID of QP %u's port", qp->qpn(),
                    format_gid(a.ah.grh.dgid).c_str(), hello.qpn);
    } else if (device->spec.link == LinkLayer::kRoce && static_cast<uint32_t>(my_type) != hello.gid_type) {
      std::snprintf(why, sizeof(why), "GID type mismatch: QP %u uses GID type %u, its peer QP %u type %u", hello.qpn,
                    hello.gid_type, qp->qpn(), static_cast<unsigned>(my_type));
    }
  }
  // Routers: across subnets a port with a FLID is reached only by it (the routers forward FLIDs,
  // and a LID of another subnet means nothing here); both directions are checked, the requester's
  // packets by the DLID they carry and this QP's own address vector towards it.
  const bool via_router = other_subnet && port->flid != 0;
  const bool peer_via_router = other_subnet && hello.flid != 0;
  if (why[0] == '\0' && device->spec.link == LinkLayer::kInfiniband &&
      hello.dlid != (via_router ? port->flid : port->lid)) {
    std::snprintf(why, sizeof(why),
                  "LID mismatch: QP %u's packets carry DLID %u, but QP %u's port is reached by %s %u (%s): no "
                  "switch or router delivers them",
                  hello.qpn, hello.dlid, qp->qpn(), via_router ? "its FLID" : "its LID",
                  via_router ? port->flid : port->lid,
                  via_router ? "another subnet, through the routers" : "the same subnet, or a router without FLIDs");
  } else if (why[0] == '\0' && device->spec.link == LinkLayer::kInfiniband &&
             a.ah.dlid != (peer_via_router ? hello.flid : hello.lid)) {
    std::snprintf(why, sizeof(why), "LID mismatch: QP %u's RTR dlid is %u, but its peer QP %u is reached by %s %u",
                  qp->qpn(), a.ah.dlid, hello.qpn, peer_via_router ? "its FLID" : "its LID",
                  peer_via_router ? hello.flid : hello.lid);
  }
  if (why[0] == '\0' && (hello.sq_psn & 0xffffff) != (qp->attrs.rq_psn & 0xffffff)) {
    std::snprintf(why, sizeof(why), "PSN mismatch: QP %u's sq_psn is %u, but its peer QP %u's rq_psn is %u", hello.qpn,
                  hello.sq_psn & 0xffffff, qp->qpn(), qp->attrs.rq_psn & 0xffffff);
  }
  if (why[0] != '\0') {
    nak(conn, IBV_WC_RETRY_EXC_ERR, why, false);
    return false;
  }
  conn->hello_checked = true;
  return true;
}

// Decides where the payload of the request in conn->header goes. False while it must wait (the QP
// is not in RTR yet, or no receive is posted) or when it was refused (conn->closing).
bool Engine::start_request(Connection* conn) {
  const MsgHeader& header = conn->header;
  MsgType type = static_cast<MsgType>(header.type);
  if (conn->qp == nullptr) {
    if (type != MsgType::kHello || header.length != sizeof(Hello)) internal_error("a connection without Hello");
    conn->small.assign(sizeof(Hello), 0);
    conn->expect_payload(sizeof(Hello), {{conn->small.data(), conn->small.size()}});
    return true;
  }
  if (!check_hello(conn)) return false;
  Qp* qp = conn->qp;
  if (qp->destroyed || qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_RESET) {
    nak(conn, IBV_WC_RETRY_EXC_ERR, "", false);
    return false;
  }
  auto remote_mr = [&](unsigned needed, const char* what) -> Mr* {
    auto found = mrs_by_rkey.find(header.rkey);
    Mr* mr = found == mrs_by_rkey.end() ? nullptr : found->second;
    char why[400] = "";
    if (mr == nullptr || mr->destroyed) {
      std::snprintf(why, sizeof(why), "%s of %llu bytes to QP %u with rkey 0x%x, which names no registered MR", what,
                    static_cast<unsigned long long>(header.length), qp->qpn(), header.rkey);
    } else if (mr->pd != qp->pd) {
      std::snprintf(why, sizeof(why), "%s to QP %u with rkey 0x%x of an MR in another PD", what, qp->qpn(),
                    header.rkey);
    } else if (!(mr->access & needed)) {
      std::snprintf(why, sizeof(why), "%s to QP %u with rkey 0x%x of an MR registered without %s", what, qp->qpn(),
                    header.rkey, needed == IBV_ACCESS_REMOTE_WRITE ? "REMOTE_WRITE" : "REMOTE_READ");
    } else if (!(qp->attrs.access & needed)) {
      std::snprintf(why, sizeof(why), "%s to QP %u whose qp_access_flags lack %s", what, qp->qpn(),
                    needed == IBV_ACCESS_REMOTE_WRITE ? "REMOTE_WRITE" : "REMOTE_READ");
    } else if (mr->translate(header.remote_addr, header.length) == nullptr) {
      std::snprintf(why, sizeof(why), "%s of [0x%llx, +%llu) to QP %u outside its MR [0x%llx, +%zu) (rkey 0x%x)", what,
                    static_cast<unsigned long long>(header.remote_addr), static_cast<unsigned long long>(header.length),
                    qp->qpn(), static_cast<unsigned long long>(mr->iova), mr->length, header.rkey);
    } else {
      return mr;
    }
    conn->failure = IBV_WC_REM_ACCESS_ERR;
    conn->failure_text = why;
    return nullptr;
  };
  switch (type) {
    case MsgType::kWrite:
    case MsgType::kWriteImm: {
      if (type == MsgType::kWriteImm && qp->rq.empty()) return receiver_not_ready(conn);
      // A zero-length write touches no memory, so its rkey is not checked (IB spec 9.4.3).
      Mr* mr = header.length == 0 ? nullptr : remote_mr(IBV_ACCESS_REMOTE_WRITE, "RDMA write");
      if (conn->failure != IBV_WC_SUCCESS) {
        conn->expect_payload(header.length, {});
        return true;
      }
      if (mr != nullptr && write_held(mr->translate(header.remote_addr, header.length), header.length)) {
        return false;  // the test holds it: this QP stalls, the others deliver (service.cc retries)
      }
      if (mr != nullptr) {
        ++mr->in_flight;
        conn->target_mr = mr;
        conn->expect_payload(header.length, {{mr->translate(header.remote_addr, header.length), header.length}});
      }
      if (type == MsgType::kWriteImm) {
        conn->recv = qp->rq.front();
        qp->rq.pop_front();
        conn->has_recv = true;
      }
      return true;
    }
    case MsgType::kSend:
    case MsgType::kSendImm: {
      if (qp->rq.empty()) return receiver_not_ready(conn);
      conn->recv = qp->rq.front();
      qp->rq.pop_front();
      conn->has_recv = true;
      std::vector<Piece> pieces;
      uint64_t room = 0;
      for (const ibv_sge& sge : conn->recv.sges) {
        if (sge.length == 0) continue;
        auto found = mrs_by_lkey.find(sge.lkey);
        Mr* mr = found == mrs_by_lkey.end() ? nullptr : found->second;
        uint8_t* host = mr == nullptr || mr->destroyed || mr->pd != qp->pd || !(mr->access & IBV_ACCESS_LOCAL_WRITE)
                            ? nullptr
                            : mr->translate(sge.addr, sge.length);
        if (host == nullptr) {
          violation(
              "receive wr_id %llu on QP %u has an sge [0x%llx, +%u) with lkey 0x%x outside a writable MR of its PD",
              static_cast<unsigned long long>(conn->recv.wr_id), qp->qpn(), static_cast<unsigned long long>(sge.addr),
              sge.length, sge.lkey);
          conn->failure = IBV_WC_REM_OP_ERR;
          conn->expect_payload(header.length, {});
          return true;
        }
        pieces.push_back({host, sge.length});
        room += sge.length;
      }
      if (header.length > room) {
        char why[300];
        std::snprintf(why, sizeof(why), "SEND of %llu bytes to QP %u exceeds its posted receive (%llu bytes)",
                      static_cast<unsigned long long>(header.length), qp->qpn(), static_cast<unsigned long long>(room));
        conn->failure = IBV_WC_REM_INV_REQ_ERR;
        conn->failure_text = why;
        pieces.clear();
      }
      conn->expect_payload(header.length, std::move(pieces));
      return true;
    }
    case MsgType::kRead: {
      if (qp->attrs.max_dest_rd_atomic == 0) {
        // No responder resources for reads: the IB spec's invalid request.
        char why[200];
        std::snprintf(why, sizeof(why), "RDMA read to QP %u, whose max_dest_rd_atomic (responder read depth) is 0",
                      qp->qpn());
        conn->failure = IBV_WC_REM_INV_REQ_ERR;
        conn->failure_text = why;
      } else if (header.length > 0) {
        remote_mr(IBV_ACCESS_REMOTE_READ, "RDMA read");
      }
      conn->expect_payload(0, {});
      return true;
    }
    default: internal_error("unexpected message at a responder");
  }
}

// No receive is posted for a SEND or a write with immediate: the sender is told "receiver not
// ready" and retries after the responder's min_rnr_timer, rnr_retry times (7: forever). Once its
// retries are spent, the request completes with IBV_WC_RNR_RETRY_EXC_ERR and the sender's QP goes
// to ERR; the receiver's QP is unharmed. Always false: the request cannot start now.
bool Engine::receiver_not_ready(Connection* conn) {
  const Clock::duration budget =
      rnr_retry_budget(static_cast<uint8_t>(conn->hello.rnr_retry), conn->qp->attrs.min_rnr_timer);
  if (budget == Clock::duration::max()) return false;
  const Clock::time_point now = Clock::now();
  if (conn->rnr_since == Clock::time_point{}) conn->rnr_since = now;
  if (now - conn->rnr_since >= budget) {
    nak(conn, IBV_WC_RNR_RETRY_EXC_ERR, "", false);
    return false;
  }
  wake_at(conn->rnr_since + budget);
  return false;
}

void Engine::finish_request(Connection* conn) {
  const MsgHeader& header = conn->header;
  MsgType type = static_cast<MsgType>(header.type);
  if (type == MsgType::kHello && conn->qp == nullptr) {
    std::memcpy(&conn->hello, conn->small.data(), sizeof(Hello));
    Device* device = conn->device;
    auto found = device->qps.find(conn->hello.dest_qpn);
    if (found != device->qps.end() && found->second->port() != conn->port) {
      char why[300];
      std::snprintf(why, sizeof(why), "QP %u sends to QP %u through port %u of %s, but QP %u is on port %u",
                    conn->hello.qpn, conn->hello.dest_qpn, conn->port->number, device->spec.name.c_str(),
                    conn->hello.dest_qpn, found->second->port()->number);
      nak(conn, IBV_WC_RETRY_EXC_ERR, why, false);
    } else if (found != device->qps.end()) {
      conn->qp = found->second;
    } else if (device->destroyed_qpns.count(conn->hello.dest_qpn) != 0) {
      nak(conn, IBV_WC_RETRY_EXC_ERR, "", false);  // it existed: a peer that went away, not a bug
    } else {
      char why[300];
      std::snprintf(why, sizeof(why), "QP %u's RTR dest_qp_num %u names no QP of device %s in process %u",
                    conn->hello.qpn, conn->hello.dest_qpn, device->spec.name.c_str(), conn->port->node.pid);
      nak(conn, IBV_WC_RETRY_EXC_ERR, why, false);
    }
    return;
  }
  Qp* qp = conn->qp;
  if (conn->target_mr != nullptr) --conn->target_mr->in_flight;
  conn->target_mr = nullptr;
  ibv_wc wc{};
  bool consumed_recv = conn->has_recv;
  if (consumed_recv) {
    wc.wr_id = conn->recv.wr_id;
    wc.qp_num = qp->qpn();
    wc.src_qp = conn->hello.qpn;
    wc.slid = static_cast<uint16_t>(conn->hello.lid);
    wc.byte_len = static_cast<uint32_t>(header.length);
    wc.opcode = type == MsgType::kWriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    if (type == MsgType::kWriteImm || type == MsgType::kSendImm) {
      wc.wc_flags = IBV_WC_WITH_IMM;
      wc.imm_data = header.imm;
    }
    conn->has_recv = false;
  }
  if (conn->failure != IBV_WC_SUCCESS) {
    // Only a SEND has consumed its receive when it fails; that receive completes in error.
    if (consumed_recv) {
      wc.status = conn->failure == IBV_WC_REM_INV_REQ_ERR ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR;
      push_completion(qp->recv_cq, wc);
    }
    nak(conn, conn->failure, conn->failure_text, true);
    return;
  }
  if (type == MsgType::kRead) {
    if (header.length > 0) {
      Mr* mr = mrs_by_rkey.at(header.rkey);
      const uint8_t* source = mr->translate(header.remote_addr, header.length);
      MsgHeader response;
      response.type = static_cast<uint32_t>(MsgType::kReadResponse);
      response.seq = header.seq;
      response.length = header.length;
      conn->queue_message(response, source, header.length);  // a copy: the MR may go once answered
    } else {
      MsgHeader response;
      response.type = static_cast<uint32_t>(MsgType::kReadResponse);
      response.seq = header.seq;
      conn->queue_message(response);
    }
    return;
  }
  if (type != MsgType::kWrite) push_completion(qp->recv_cq, wc);
  MsgHeader ack;
  ack.type = static_cast<uint32_t>(MsgType::kAck);
  ack.seq = header.seq;
  conn->queue_message(ack);
}

void Engine::pump_responder(Connection* conn) {
  for (int messages = 0; messages < kMessagesPerTurn && !conn->dead && !conn->closing; ++messages) {
    if (!conn->header_taken) {
      IoResult result = conn->read_header();
      if (result == IoResult::kClosed) return close_connection(conn);
      if (result == IoResult::kWouldBlock) return;
      if (!start_request(conn)) return;
      conn->header_taken = true;
    }
    IoResult result = conn->read_payload(kIoBudget);
    if (result == IoResult::kClosed) return close_connection(conn);
    if (result == IoResult::kWouldBlock) return;
    finish_request(conn);
    if (!conn->closing) conn->reset_input();
  }
}

}  // namespace sieve::fake_verbs
