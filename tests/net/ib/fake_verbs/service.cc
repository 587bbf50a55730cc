// The RC engine: the service thread and both ends of the protocol in wire.h.
//
// A requester QP opens one connection to the remote device's endpoint when it first has work in RTS,
// says Hello (who it is, which QP it wants, its sq_psn) and streams its work requests; the responder
// checks the pairing against its own RTR attributes, applies each request to its registered memory
// (or consumes a posted receive) and answers in order; the requester completes work requests on
// those answers. Every socket is non-blocking and the thread never waits on one peer, so a receiver
// that has no receive posted (RNR) only stalls its own connection, as rnr_retry=7 would.
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/net/ib/fake_verbs/engine.h"
#include "tests/net/ib/fake_verbs/violation.h"

namespace sieve::fake_verbs {
namespace {

constexpr size_t kIoBudget = 8u << 20;  // per connection per turn, so one big transfer cannot starve others
constexpr int kSocketBuffer = 4 << 20;
constexpr int kMessagesPerTurn = 256;

void tune(int fd) {
  int size = kSocketBuffer;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

// 0 once connected, EAGAIN while the listener's backlog is full, else why it failed (a dead peer).
int connect_abstract(const std::string& name, int* fd_out) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  tune(fd);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    int error = errno == EINPROGRESS ? EAGAIN : errno;
    ::close(fd);
    return error;
  }
  *fd_out = fd;
  return 0;
}

[[noreturn]] void internal_error(const char* what) {
  std::fprintf(stderr, "fake-verbs: internal error: %s\n", what);
  std::abort();
}

ibv_wc_opcode send_wc_opcode(ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return IBV_WC_SEND;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    default:
      return IBV_WC_RDMA_WRITE;
  }
}

MsgType request_type(ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return MsgType::kWriteImm;
    case IBV_WR_SEND:
      return MsgType::kSend;
    case IBV_WR_SEND_WITH_IMM:
      return MsgType::kSendImm;
    case IBV_WR_RDMA_READ:
      return MsgType::kRead;
    default:
      return MsgType::kWrite;
  }
}

bool input_blocked(const Connection* conn) {
  return conn->header_bytes == sizeof(MsgHeader) && !conn->header_taken;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Completions and QP errors

void Engine::push_completion(Cq* cq, const ibv_wc& wc) {
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    if (cq->entries.size() < cq->capacity) {
      cq->entries.push_back(wc);
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

void Engine::post_async(Context* context, const ibv_async_event& event) { context->async->push(event); }

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
    push_completion(qp->send_cq, wc);
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
    push_completion(qp->send_cq, wc);
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
// Requester

void Engine::open_requester(Qp* qp) {
  auto conn = std::make_unique<Connection>();
  conn->role = Connection::Role::kRequester;
  conn->qp = qp;
  if (qp->device()->spec.link == LinkLayer::kRoce) {
    GidForm form;
    NodeAddress node;
    decode_gid(qp->attrs.ah.grh.dgid, &form, &node);  // checked at RTR
    conn->endpoint = roce_endpoint_name(node);
  } else {
    conn->endpoint = ib_endpoint_name(qp->attrs.ah.dlid);
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
  bool queued_work = false;
  for (const SendWr& wr : qp->sq) queued_work |= wr.stage == SendWr::Stage::kQueued;
  if (!queued_work) return;
  if (qp->requester == nullptr) open_requester(qp);
  Connection* conn = qp->requester;
  if (!conn->connected) {
    int error = connect_abstract(conn->endpoint, &conn->fd);
    if (error == EAGAIN) return;  // backlog full: the loop retries shortly
    if (error != 0) {
      requester_lost(conn);  // nobody listens there any more: the peer is gone
      return;
    }
    conn->connected = true;
    const Device* device = qp->device();
    Hello hello;
    hello.pid = device->node.pid;
    hello.device_index = device->node.device_index;
    hello.link = static_cast<uint32_t>(device->spec.link);
    hello.lid = device->lid;
    hello.gid_type = device->gid_types[qp->attrs.ah.grh.sgid_index < device->gid_count ? qp->attrs.ah.grh.sgid_index : 0];
    hello.qpn = qp->qpn();
    hello.dest_qpn = qp->attrs.dest_qp_num;
    hello.sq_psn = qp->attrs.sq_psn;
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

// ---------------------------------------------------------------------------------------------
// Responder

void Engine::accept_on(Device* device) {
  for (;;) {
    int fd = ::accept4(device->listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    tune(fd);
    auto conn = std::make_unique<Connection>();
    conn->role = Connection::Role::kResponder;
    conn->fd = fd;
    conn->device = device;
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
  char why[400] = "";
  if (hello.link != static_cast<uint32_t>(device->spec.link)) {
    std::snprintf(why, sizeof(why), "QP %u (%s) sends to QP %u on %s, whose link layer differs", hello.qpn,
                  hello.link == static_cast<uint32_t>(LinkLayer::kRoce) ? "RoCE" : "IB", qp->qpn(),
                  device->spec.name.c_str());
  } else if (qp->attrs.dest_qp_num != hello.qpn) {
    std::snprintf(why, sizeof(why), "QP pairing: QP %u sends to QP %u, but QP %u's RTR dest_qp_num is %u",
                  hello.qpn, qp->qpn(), qp->qpn(), qp->attrs.dest_qp_num);
  } else if (device->spec.link == LinkLayer::kRoce) {
    GidForm form;
    NodeAddress node;
    ibv_gid_type my_type = device->gid_types[qp->attrs.ah.grh.sgid_index];
    bool names_requester = decode_gid(qp->attrs.ah.grh.dgid, &form, &node) && node.pid == hello.pid &&
                           node.device_index == hello.device_index;
    if (!names_requester) {
      std::snprintf(why, sizeof(why), "GID mismatch: QP %u's RTR dgid %s is not the GID of QP %u's device",
                    qp->qpn(), format_gid(qp->attrs.ah.grh.dgid).c_str(), hello.qpn);
    } else if (static_cast<uint32_t>(my_type) != hello.gid_type) {
      std::snprintf(why, sizeof(why), "GID type mismatch: QP %u uses GID type %u, its peer QP %u type %u",
                    hello.qpn, hello.gid_type, qp->qpn(), static_cast<unsigned>(my_type));
    }
  } else if (qp->attrs.ah.dlid != hello.lid) {
    std::snprintf(why, sizeof(why), "LID mismatch: QP %u's RTR dlid is %u, but its peer QP %u has LID %u", qp->qpn(),
                  qp->attrs.ah.dlid, hello.qpn, hello.lid);
  }
  if (why[0] == '\0' && (hello.sq_psn & 0xffffff) != (qp->attrs.rq_psn & 0xffffff)) {
    std::snprintf(why, sizeof(why), "PSN mismatch: QP %u's sq_psn is %u, but its peer QP %u's rq_psn is %u",
                  hello.qpn, hello.sq_psn & 0xffffff, qp->qpn(), qp->attrs.rq_psn & 0xffffff);
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
      std::snprintf(why, sizeof(why),
                    "%s of [0x%llx, +%llu) to QP %u outside its MR [0x%llx, +%zu) (rkey 0x%x)", what,
                    static_cast<unsigned long long>(header.remote_addr),
                    static_cast<unsigned long long>(header.length), qp->qpn(),
                    static_cast<unsigned long long>(mr->iova), mr->length, header.rkey);
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
      if (type == MsgType::kWriteImm && qp->rq.empty()) return false;  // RNR: wait for a receive
      // A zero-length write touches no memory, so its rkey is not checked (IB spec 9.4.3).
      Mr* mr = header.length == 0 ? nullptr : remote_mr(IBV_ACCESS_REMOTE_WRITE, "RDMA write");
      if (conn->failure != IBV_WC_SUCCESS) {
        conn->expect_payload(header.length, {});
        return true;
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
      if (qp->rq.empty()) return false;  // RNR: wait for a receive
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
          violation("receive wr_id %llu on QP %u has an sge [0x%llx, +%u) with lkey 0x%x outside a writable MR of its PD",
                    static_cast<unsigned long long>(conn->recv.wr_id), qp->qpn(),
                    static_cast<unsigned long long>(sge.addr), sge.length, sge.lkey);
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
                      static_cast<unsigned long long>(header.length), qp->qpn(),
                      static_cast<unsigned long long>(room));
        conn->failure = IBV_WC_REM_INV_REQ_ERR;
        conn->failure_text = why;
        pieces.clear();
      }
      conn->expect_payload(header.length, std::move(pieces));
      return true;
    }
    case MsgType::kRead: {
      if (header.length > 0) remote_mr(IBV_ACCESS_REMOTE_READ, "RDMA read");
      conn->expect_payload(0, {});
      return true;
    }
    default:
      internal_error("unexpected message at a responder");
  }
}

void Engine::finish_request(Connection* conn) {
  const MsgHeader& header = conn->header;
  MsgType type = static_cast<MsgType>(header.type);
  if (type == MsgType::kHello && conn->qp == nullptr) {
    std::memcpy(&conn->hello, conn->small.data(), sizeof(Hello));
    Device* device = conn->device;
    auto found = device->qps.find(conn->hello.dest_qpn);
    if (found != device->qps.end()) {
      conn->qp = found->second;
    } else if (device->destroyed_qpns.count(conn->hello.dest_qpn) != 0) {
      nak(conn, IBV_WC_RETRY_EXC_ERR, "", false);  // it existed: a peer that went away, not a bug
    } else {
      char why[300];
      std::snprintf(why, sizeof(why), "QP %u's RTR dest_qp_num %u names no QP of device %s in process %u",
                    conn->hello.qpn, conn->hello.dest_qpn, device->spec.name.c_str(), device->node.pid);
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

// ---------------------------------------------------------------------------------------------
// The loop

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
    if (conn->dead) continue;
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

void Engine::service_loop() {
  std::vector<pollfd> fds;
  std::vector<Device*> listeners;
  std::vector<Connection*> polled;
  for (;;) {
    int timeout = -1;
    {
      std::lock_guard<std::mutex> lock(mu);
      progress();
      fds.clear();
      listeners.clear();
      polled.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      for (auto& device : devices_) {
        if (device->listen_fd < 0) continue;
        fds.push_back({device->listen_fd, POLLIN, 0});
        listeners.push_back(device.get());
      }
      for (auto& conn : connections_) {
        if (conn->dead) continue;
        if (conn->fd < 0) {
          timeout = 1;  // a requester waiting for a full backlog to drain
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
    while (::read(wake_fd_, &wakes, sizeof(wakes)) > 0) {
    }
    for (size_t i = 0; i < listeners.size(); ++i) {
      if (fds[1 + i].revents != 0) accept_on(listeners[i]);
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
