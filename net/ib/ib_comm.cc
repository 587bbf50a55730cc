// SPDX-License-Identifier: Apache-2.0
#include "net/ib/ib_comm.h"

#include <endian.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/ib/completion_error.h"
#include "net/log.h"
#include "net/socket.h"

namespace sieve::net::ib {

namespace {

// Work request ids: what completed, for which request slot, on which queue pair.
// Write: a write with the immediate (signaled); WriteData: the data ahead of a zero-byte Write
// under adaptive routing (unsignaled: it completes only in error).
enum class Work : uint64_t {
  AnnounceRecv = 1,
  Write = 2,
  DataRecv = 3,
  AnnounceSend = 4,
  FlushRead = 5,
  WriteData = 6
};
uint64_t work_id(Work kind, uint32_t index, int qp) {
  return (static_cast<uint64_t>(kind) << 56) | (uint64_t(index) << 8) | static_cast<uint64_t>(qp);
}
Work work_kind(uint64_t id) { return static_cast<Work>(id >> 56); }
uint32_t work_index(uint64_t id) { return static_cast<uint32_t>((id >> 8) & 0xffff); }
int work_qp(uint64_t id) { return static_cast<int>(id & 0xff); }
const char* work_name(Work kind) {
  switch (kind) {
    case Work::AnnounceRecv: return "receive of a slot announcement";
    case Work::Write: return "RDMA write";
    case Work::WriteData: return "RDMA write";
    case Work::DataRecv: return "receive of an RDMA write's immediate";
    case Work::AnnounceSend: return "send of a slot announcement";
    case Work::FlushRead: return "flush read";
  }
  return "work request";
}

// Queue depths: at most kMaxRequests messages are in flight per comm, each posting at most one
// work request per queue pair; the send queue also holds announcements whose completion is not
// polled yet. The completion queue holds everything all queues can complete at once.
constexpr int kRecvDepth = kMaxRequests;
constexpr int kSendDepth = 2 * kMaxRequests;

// The immediate of a write into a receive that is too small: bit 31, which no size below
// kMaxMessageBytes sets. The receiver fails its request; the sender fails its own.
constexpr uint32_t kImmTooLarge = 0x80000000u;

constexpr uint32_t kAnnounceMagic = 0x41564953;  // "SIVA"
constexpr uint32_t kGoodbyeMagic = 0x47564953;   // "SIVG"
constexpr auto kLivenessInterval = std::chrono::milliseconds(50);
// A peer's socket may close right after its last message: completions still in the queue win.
constexpr auto kCloseGrace = std::chrono::milliseconds(100);

int qps_for(size_t capacity, int nqps) {
  const size_t wanted = (capacity + kSplitBytesPerQp - 1) / kSplitBytesPerQp;
  return static_cast<int>(std::clamp<size_t>(wanted, 1, static_cast<size_t>(nqps)));
}

uint32_t random_psn() { return static_cast<uint32_t>(random64() & 0xffffff); }

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string bytes_text(uint64_t n) { return std::to_string(n) + " bytes"; }

}  // namespace

// ---------------------------------------------------------------- shared comm

Status IbRequest::test(Completion* out) { return owner->test(this, out); }
void* IbRequest::comm_tag() const { return owner->tag(); }

IbComm::IbComm(IbCommConfig config, Connection connection)
    : config_(std::move(config)),
      connection_(std::move(connection)),
      regions_(config_.registrations ? config_.registrations : std::make_shared<RegionTable>(config_.device)),
      own_regions_(std::make_shared<RegionList>()) {
  for (uint32_t i = 0; i < requests_.size(); ++i) {
    requests_[i].owner = this;
    requests_[i].index = i;
  }
}

IbComm::~IbComm() {
  // Queue pairs first (they flush their work), then the completion queue they feed, then memory.
  if (loopback_) verbs().destroy_qp(loopback_);
  for (ibv_qp* qp : qps_) verbs().destroy_qp(qp);
  if (cq_) verbs().destroy_cq(cq_);
  for (const void* object : device_objects_) config_.device->forget(object);
  if (control_mr_) verbs().dereg_mr(control_mr_);
}

Status IbComm::create() {
  const VerbsLibrary& v = verbs();
  const std::string& dev = config_.device->name();
  int cqe = config_.nqps * (kSendDepth + kRecvDepth) + kSendDepth + kRecvDepth;  // + the flush loopback
  if (config_.max_cqe > 0 && cqe > config_.max_cqe)
    return error(Code::kSystemError, dev + " allows " + std::to_string(config_.max_cqe) + " completions per queue, " +
                                         std::to_string(cqe) + " needed for " + std::to_string(config_.nqps) +
                                         " queue pairs (lower SIEVE_IB_QPS)");
  cq_ = v.create_cq(config_.device->context(), cqe, nullptr, nullptr, 0);
  if (!cq_)
    return error(Code::kSystemError,
                 "ibv_create_cq(" + std::to_string(cqe) + ") on " + dev + " failed: " + errno_text(errno));
  device_objects_.push_back(cq_);
  Status allocated = PageBuffer::allocate(kMaxRequests * kAnnounceBytes + 64, &control_);
  if (!allocated.ok())
    return error(allocated.code(), "control buffer for a comm on " + dev + ": " + allocated.message());
  control_mr_ = v.reg_mr_iova2(config_.device->pd(), control_.data(), control_.size(),
                               reinterpret_cast<uintptr_t>(control_.data()), IBV_ACCESS_LOCAL_WRITE);
  if (!control_mr_)
    return error(Code::kSystemError, "ibv_reg_mr of the control buffer on " + dev + " failed: " + errno_text(errno));
  for (int q = 0; q < config_.nqps; ++q) {
    ibv_qp_init_attr init{};
    init.send_cq = cq_;
    init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = kSendDepth;
    init.cap.max_recv_wr = kRecvDepth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.sq_sig_all = 0;
    ibv_qp* qp = v.create_qp(config_.device->pd(), &init);
    if (!qp) return error(Code::kSystemError, "ibv_create_qp on " + dev + " failed: " + errno_text(errno));
    qps_.push_back(qp);
    device_objects_.push_back(qp);
    psn_.push_back(random_psn());
    Status st = qp_to_init(v, qp, config_.port);
    if (!st.ok()) return error(st.code(), st.message() + " (" + config_.port.name + ")");
  }
  return ok_status();
}

SetupInfo IbComm::local_setup() const {
  SetupInfo info;
  info.link_layer = config_.port.link_layer;
  info.mtu = config_.port.mtu;
  info.lid = config_.port.lid;
  info.gid = config_.port.gid;
  info.service = config_.service;
  info.pkey = config_.port.pkey;
  for (size_t q = 0; q < qps_.size(); ++q) {
    info.qpn.push_back(qps_[q]->qp_num);
    info.psn.push_back(psn_[q]);
  }
  return info;
}

Status IbComm::check_peer(const SetupInfo& remote) const {
  if (remote.link_layer != config_.port.link_layer)
    return error(Code::kInvalidUsage, "peer " + connection_.peer + "'s port is " +
                                          (remote.link_layer == LinkLayer::Ethernet ? "RoCE" : "InfiniBand") + ", " +
                                          config_.port.name + " is not: the two cannot be connected");
  if (!same_partition(remote.pkey, config_.port.pkey)) {
    char keys[96];
    snprintf(keys, sizeof keys, "P_Key 0x%04x, %s uses 0x%04x at index %d", remote.pkey, config_.port.name.c_str(),
             config_.port.pkey, config_.port.pkey_index);
    return error(Code::kInvalidUsage, "peer " + connection_.peer + " is in another InfiniBand partition (" + keys +
                                          "): the switches drop every packet between them; set SIEVE_IB_PKEY (or "
                                          "NCCL_IB_PKEY) to an index of the same partition on every node");
  }
  return ok_status();
}

Status IbComm::connect(const SetupInfo& remote) {
  Status checked = check_peer(remote);
  if (!checked.ok()) return checked;
  if (remote.qpn.size() != qps_.size())
    return error(Code::kRemoteError, "peer " + connection_.peer + " set up " + std::to_string(remote.qpn.size()) +
                                         " queue pairs, this side " + std::to_string(qps_.size()));
  remote_gid_ = remote.gid;
  remote_qpns_ = remote.qpn;
  for (size_t q = 0; q < qps_.size(); ++q) {
    Status st = qp_to_rts(verbs(), qps_[q], config_.port, psn_[q], remote, remote.qpn[q], remote.psn[q],
                          config_.service, config_.retry);
    if (!st.ok()) return error(st.code(), st.message() + " (queue pair to " + connection_.peer + ")");
  }
  return prepare();
}

std::vector<int> IbComm::take_qps(int used) {
  std::vector<int> qps(static_cast<size_t>(used));
  for (int i = 0; i < used; ++i) qps[static_cast<size_t>(i)] = (next_qp_ + i) % nqps();
  next_qp_ = (next_qp_ + used) % nqps();
  return qps;
}

IbRequest* IbComm::free_request() {
  for (auto& r : requests_) {
    if (r.busy) continue;
    const uint32_t index = r.index;
    r = IbRequest{};
    r.owner = this;
    r.index = index;
    r.busy = true;
    return &r;
  }
  return nullptr;
}

Status IbComm::register_region(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out) {
  // Relaxed ordering lets the root complex reorder the NIC's writes into the buffer (GPUDirect
  // bandwidth on VMs and some hosts depends on it); nothing reads a buffer before its immediate's
  // completion, which PCIe orders after them, and a flush orders GPU memory. An optional access
  // flag: devices that cannot do it ignore it.
  const unsigned access = kRemoteAccess | (config_.relaxed_ordering ? unsigned(IBV_ACCESS_RELAXED_ORDERING) : 0u);
  return ib::register_region(regions_, own_regions_, memory, access, out);
}

Status IbComm::find_region(const char* call, const void* data, size_t size, uint32_t* lkey, uint32_t* rkey) const {
  // This comm's own registrations first (a short list), then the device's (regIsGlobal: NCCL may
  // register a buffer on one comm and move it on another).
  const uint64_t begin = reinterpret_cast<uintptr_t>(data);
  if (own_regions_->find(begin, size, lkey, rkey) || regions_->regions().find(begin, size, lkey, rkey))
    return ok_status();
  char where[64];
  snprintf(where, sizeof where, "%p", data);
  return error(Code::kInvalidUsage,
               std::string(call) + ": the " + bytes_text(size) + " at " + where +
                   " are not inside memory registered on this comm's device (regMr first; the verbs "
                   "transport moves only registered memory)");
}

Status IbComm::post_send(int qp, ibv_send_wr* wr) {
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qps_[qp], wr, &bad);
  if (rc != 0)
    return error(Code::kSystemError, "ibv_post_send on queue pair " + std::to_string(qp) + " to " + connection_.peer +
                                         " failed: " + errno_text(rc));
  return ok_status();
}

Status IbComm::post_recv(int qp, ibv_recv_wr* wr) {
  ibv_recv_wr* bad = nullptr;
  int rc = ibv_post_recv(qps_[qp], wr, &bad);
  if (rc != 0)
    return error(Code::kSystemError, "ibv_post_recv on queue pair " + std::to_string(qp) + " to " + connection_.peer +
                                         " failed: " + errno_text(rc));
  return ok_status();
}

void IbComm::progress() {
  ibv_wc wcs[16];
  for (int round = 0; round < 8; ++round) {
    const int n = ibv_poll_cq(cq_, 16, wcs);
    if (n < 0) {
      failure_.set(error(Code::kSystemError, "ibv_poll_cq failed on the comm to " + connection_.peer));
      return;
    }
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS) {
        if (landed_before_close(wc)) continue;
        // The first error completion fails the comm; the ones it flushes after it add nothing.
        failure_.set(error(Code::kSystemError, describe_failed(wc)));
        if (IbRequest* r = request_of(wc)) {
          r->work_failed = true;
          // An unsignaled data write is not pending: the write with its immediate, queued behind
          // it on the queue pair now in error, completes (flushed) and ends the count.
          if (r->pending > 0 && work_kind(wc.wr_id) != Work::WriteData) --r->pending;
        }
        continue;
      }
      // After a failure only what frees a request's buffer still counts.
      if (!failure_.failed() || request_of(wc)) on_completion(wc);
    }
    if (n < 16) break;
  }
  check_liveness();
  check_device();
  if (failure_.failed()) enter_error();
}

std::string IbComm::describe_failed(const ibv_wc& wc) const {
  CompletionErrorContext context;
  context.work = work_name(work_kind(wc.wr_id));
  context.peer = connection_.peer;
  context.port = config_.port.name;
  context.local_gid = config_.port.gid;
  context.retry = config_.retry;
  if (loopback_ && wc.qp_num == loopback_->qp_num) {  // the flush read: to itself
    context.remote_gid = config_.port.gid;
    context.remote_qpn = wc.qp_num;
  } else {
    context.remote_gid = remote_gid_;
    for (size_t q = 0; q < qps_.size() && q < remote_qpns_.size(); ++q)
      if (qps_[q]->qp_num == wc.qp_num) context.remote_qpn = remote_qpns_[q];
  }
  return describe_completion_error(wc, verbs().wc_status_str(wc.status), context);
}

void IbComm::check_device() {
  const Clock::time_point now = Clock::now();
  if (now < next_device_check_ || device_lost_) return;
  next_device_check_ = now + DeviceContext::kEventInterval;
  Status st = config_.device->health(device_objects_);
  if (st.ok()) return;
  device_lost_ = config_.device->lost();
  failure_.set(error(st.code(), st.message() + " (comm with " + connection_.peer + ")"));
}

IbRequest* IbComm::request_of(const ibv_wc& wc) {
  const Work kind = work_kind(wc.wr_id);
  if (kind != Work::Write && kind != Work::WriteData && kind != Work::FlushRead) return nullptr;
  IbRequest& r = requests_[work_index(wc.wr_id) % kMaxRequests];
  return r.busy ? &r : nullptr;
}

void IbComm::enter_error() {
  if (in_error_) return;
  in_error_ = true;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  for (ibv_qp* qp : qps_) verbs().modify_qp(qp, &attr, IBV_QP_STATE);
  if (loopback_) verbs().modify_qp(loopback_, &attr, IBV_QP_STATE);
}

void IbComm::check_liveness(bool now_please) {
  const Clock::time_point now = Clock::now();
  if (!now_please && now < next_liveness_check_) return;
  next_liveness_check_ = now + kLivenessInterval;
  while (!peer_closed_) {
    const int fd = connection_.control.get();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return;
    ssize_t n = 0;
    if (expects_goodbye_ && !peer_said_goodbye_) {
      n = ::recv(fd, goodbye_ + goodbye_read_, kGoodbyeBytes - goodbye_read_, MSG_DONTWAIT);
      if (n > 0) {
        goodbye_read_ += static_cast<size_t>(n);
        if (goodbye_read_ < kGoodbyeBytes) continue;
        if (get32(goodbye_) != kGoodbyeMagic) {
          failure_.set(error(Code::kRemoteError, "peer " + connection_.peer + " sent a malformed goodbye"));
          return;
        }
        peer_said_goodbye_ = true;
        peer_landed_ = get64(goodbye_ + 4);
        continue;
      }
    } else {
      char byte = 0;
      n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) {
        failure_.set(error(
            Code::kRemoteError,
            "peer " + connection_.peer + " sent bytes on the verbs liveness socket, which carries none after set-up"));
        return;
      }
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    peer_closed_ = true;
    peer_closed_at_ = now;
    peer_closed_reason_ = n == 0 ? (peer_said_goodbye_ ? "closed its receive comm" : "closed the connection")
                                 : "connection failed: " + errno_text(errno);
  }
  if (now - peer_closed_at_ >= kCloseGrace)
    failure_.set(error(Code::kRemoteError, "peer " + connection_.peer + " " + peer_closed_reason_ +
                                               " (its process ended or its comm was closed)"));
}

Status IbComm::finish(IbRequest* request, Completion* out) {
  out->done = true;
  out->size = request->kind == IbRequest::Kind::Flush ? 0 : request->size;
  out->wire_bytes = out->size;
  out->sent = request->kind == IbRequest::Kind::Send;
  out->message = request->kind != IbRequest::Kind::Flush;
  request->busy = false;
  return ok_status();
}

Status IbComm::report(IbRequest* request, const Status& status) {
  request->busy = false;
  SIEVE_WARN("%s", status.message().c_str());
  return status;
}

Status IbComm::fail(const Status& status) {
  failure_.set(status);
  return failure_.surface();
}

// ---------------------------------------------------------------- send

Status IbSendComm::prepare() {
  for (uint32_t i = 0; i < kMaxRequests; ++i) {
    Status st = post_announce_receive(i);
    if (!st.ok()) return st;
  }
  return ok_status();
}

Status IbSendComm::post_announce_receive(uint32_t i) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(announce(i)), static_cast<uint32_t>(kAnnounceBytes), control_mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = work_id(Work::AnnounceRecv, i, 0);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return post_recv(0, &wr);
}

Status IbSendComm::isend(const void* data, size_t size, Request** request) {
  *request = nullptr;
  if (failure_.failed()) return failure_.surface();
  if (size > 0 && !data) return error(Code::kInvalidArgument, "isend of " + bytes_text(size) + " from a null buffer");
  if (size > config_.max_message_bytes)
    return error(Code::kInvalidUsage, "isend of " + bytes_text(size) + " to " + connection_.peer + ": " +
                                          config_.port.name + " carries at most " +
                                          bytes_text(config_.max_message_bytes) + " per message (its maxP2pBytes)");
  uint32_t lkey = 0;
  if (size > 0) {
    Status st = find_region("isend", data, size, &lkey, nullptr);
    if (!st.ok()) return st;
  }
  IbRequest* r = free_request();
  if (!r) return ok_status();  // kMaxRequests outstanding: NCCL retries
  r->kind = IbRequest::Kind::Send;
  r->data = static_cast<char*>(const_cast<void*>(data));
  r->size = size;
  r->lkey = lkey;
  r->sequence = next_send_sequence_++;
  waiting_.push_back(r);
  *request = r;
  progress();
  match();
  return ok_status();
}

void IbSendComm::on_completion(const ibv_wc& wc) {
  const Work kind = work_kind(wc.wr_id);
  if (kind == Work::AnnounceRecv) {
    const uint32_t i = work_index(wc.wr_id);
    const uint8_t* m = announce(i);
    Slot slot{get64(m + 8), get64(m + 16), get64(m + 24), get32(m + 4)};
    if (get32(m) != kAnnounceMagic || wc.byte_len != kAnnounceBytes || slot.sequence != next_slot_sequence_) {
      failure_.set(error(Code::kRemoteError, "peer " + connection_.peer +
                                                 " announced a receive out of order or malformed "
                                                 "(sequence " +
                                                 std::to_string(slot.sequence) + ", expected " +
                                                 std::to_string(next_slot_sequence_) + ")"));
      return;
    }
    ++next_slot_sequence_;
    slots_.push_back(slot);
    Status st = post_announce_receive(i);  // at once: the peer may announce again as soon as a receive is done
    if (!st.ok()) failure_.set(st);
    return;
  }
  if (kind == Work::Write) {
    IbRequest& r = requests_[work_index(wc.wr_id) % kMaxRequests];
    if (r.busy && r.kind == IbRequest::Kind::Send && r.pending > 0) --r.pending;
    return;
  }
  if (failure_.failed()) return;
}

bool IbSendComm::landed_before_close(const ibv_wc& wc) {
  const Work kind = work_kind(wc.wr_id);
  if (kind != Work::Write && kind != Work::WriteData) return false;
  check_liveness(true);  // the goodbye, if the peer sent one, is on the socket already
  IbRequest& r = requests_[work_index(wc.wr_id) % kMaxRequests];
  if (!peer_said_goodbye_ || !r.busy || r.kind != IbRequest::Kind::Send || r.sequence >= peer_landed_) return false;
  // Landed: the flush or retry error only ends its work request (the data part counts for nothing).
  if (kind == Work::Write && r.pending > 0) --r.pending;
  return true;
}

void IbSendComm::match() {
  while (!waiting_.empty() && !slots_.empty() && !failure_.failed()) {
    IbRequest* r = waiting_.front();
    const Slot slot = slots_.front();
    waiting_.pop_front();
    slots_.pop_front();
    Status st = post_writes(r, slot);
    if (!st.ok()) failure_.set(st);
  }
}

Status IbSendComm::post_writes(IbRequest* r, const Slot& slot) {
  const int used = qps_for(slot.capacity, nqps());
  r->used_qps = used;
  r->too_large = r->size > slot.capacity;
  r->posted = true;
  if (r->too_large)
    r->error = error(Code::kInvalidUsage, "isend of " + bytes_text(r->size) + " to " + connection_.peer +
                                              " is larger than the receive it posted (" + bytes_text(slot.capacity) +
                                              "): a send larger than its receive is an error");
  // Each queue pair used carries its share of the message and one immediate: the receiver counts
  // immediates, so every used queue pair writes, even zero bytes. Under adaptive routing the
  // packets of one write may take different paths and arrive out of order, and a write's
  // immediate could be delivered before all of its data is placed: above adaptive_routing_bytes the
  // data goes as a plain write and the immediate in a zero-byte write behind it, which the
  // responder completes only after the earlier write (as NCCL's IB transport does).
  const uint32_t imm = r->too_large ? kImmTooLarge : static_cast<uint32_t>(r->size);
  const size_t share =
      r->too_large ? 0 : (((r->size + used - 1) / used + kQpSplitAlign - 1) / kQpSplitAlign) * kQpSplitAlign;
  const bool split = config_.adaptive_routing && r->size > config_.adaptive_routing_bytes;
  const std::vector<int> qps = take_qps(used);
  for (int i = 0; i < used; ++i) {
    const int q = qps[static_cast<size_t>(i)];
    const size_t offset = std::min(r->size, i * share);
    const size_t length = std::min(share, r->size - offset);
    ibv_sge sge{reinterpret_cast<uintptr_t>(r->data + offset), static_cast<uint32_t>(length), r->lkey};
    ibv_send_wr data{};
    ibv_send_wr wr{};
    wr.wr_id = work_id(Work::Write, r->index, q);
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htobe32(imm);
    wr.wr.rdma.remote_addr = slot.address + offset;
    wr.wr.rdma.rkey = slot.rkey;
    ibv_send_wr* first = &wr;
    if (split && length > 0) {
      data.wr_id = work_id(Work::WriteData, r->index, q);
      data.opcode = IBV_WR_RDMA_WRITE;
      data.sg_list = &sge;
      data.num_sge = 1;
      data.wr.rdma.remote_addr = slot.address + offset;
      data.wr.rdma.rkey = slot.rkey;
      data.next = &wr;
      first = &data;
    } else if (length > 0) {
      wr.sg_list = &sge;
      wr.num_sge = 1;
    }
    Status st = post_send(q, first);
    if (!st.ok()) return st;
    ++r->pending;
  }
  return ok_status();
}

Status IbSendComm::test(IbRequest* r, Completion* out) {
  *out = Completion{};
  if (!r->busy) return error(Code::kInvalidUsage, "test of a request that is not outstanding");
  progress();
  match();
  if (r->posted && r->pending == 0) {
    if (r->work_failed) {
      r->busy = false;
      return failure_.surface();
    }
    return r->too_large ? report(r, r->error) : finish(r, out);
  }
  if (failure_.failed()) {
    // Writes still queued finish as flushed (the queue pairs are in error) before the buffer is let go.
    if (r->posted && r->pending > 0 && flushes_will_come()) return ok_status();
    r->busy = false;
    return failure_.surface();
  }
  return ok_status();
}

// ---------------------------------------------------------------- receive

IbRecvComm::~IbRecvComm() {
  // Tell the sender which messages landed: their writes' acknowledgements may go with the queue
  // pairs destroyed next (or with this process). Best effort: a full socket or a dead peer drops it.
  if (qps_.size() && !failure_.failed()) {
    progress();
    uint8_t goodbye[kGoodbyeBytes];
    put32(goodbye, kGoodbyeMagic);
    put64(goodbye + 4, landed_);
    (void)::send(connection_.control.get(), goodbye, sizeof goodbye, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

void IbRecvComm::landed(uint64_t sequence) {
  landed_ahead_.insert(sequence);
  while (!landed_ahead_.empty() && *landed_ahead_.begin() == landed_) {
    landed_ahead_.erase(landed_ahead_.begin());
    ++landed_;
  }
}

Status IbRecvComm::prepare() {
  if (config_.gpu_flush) {
    Status st = create_loopback();
    if (!st.ok()) return st;
  }
  expecting_.resize(nqps());
  for (int q = 0; q < nqps(); ++q) {
    for (int i = 0; i < kRecvDepth; ++i) {
      Status st = post_data_receive(q);
      if (!st.ok()) return st;
    }
  }
  return ok_status();
}

Status IbRecvComm::post_data_receive(int qp) {
  // An RDMA write with immediate consumes a receive but places nothing through it: no buffer.
  ibv_recv_wr wr{};
  wr.wr_id = work_id(Work::DataRecv, 0, qp);
  wr.sg_list = nullptr;
  wr.num_sge = 0;
  return post_recv(qp, &wr);
}

Status IbRecvComm::irecv(void* data, size_t capacity, Request** request) {
  *request = nullptr;
  if (failure_.failed()) return failure_.surface();
  if (capacity > 0 && !data)
    return error(Code::kInvalidArgument, "irecv of " + bytes_text(capacity) + " into a null buffer");
  uint32_t rkey = 0;
  if (capacity > 0) {
    Status st = find_region("irecv", data, capacity, nullptr, &rkey);
    if (!st.ok()) return st;
  }
  if (sends_in_flight_ >= kSendDepth) progress();
  if (sends_in_flight_ >= kSendDepth) return ok_status();  // announcements not yet acknowledged: retry
  IbRequest* r = free_request();
  if (!r) return ok_status();
  r->kind = IbRequest::Kind::Recv;
  r->data = static_cast<char*>(data);
  r->capacity = capacity;
  r->sequence = next_sequence_++;
  r->used_qps = qps_for(capacity, nqps());
  r->pending = r->used_qps;
  for (int q : take_qps(r->used_qps)) expecting_[static_cast<size_t>(q)].push_back(r);
  uint8_t* m = announce(r->index);
  put32(m, kAnnounceMagic);
  put32(m + 4, rkey);
  put64(m + 8, r->sequence);
  put64(m + 16, reinterpret_cast<uintptr_t>(data));
  put64(m + 24, capacity);
  ibv_sge sge{reinterpret_cast<uintptr_t>(m), static_cast<uint32_t>(kAnnounceBytes), control_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = work_id(Work::AnnounceSend, r->index, 0);
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  Status st = post_send(0, &wr);
  if (!st.ok()) return fail(st);
  ++sends_in_flight_;
  *request = r;
  progress();
  return ok_status();
}

void IbRecvComm::on_completion(const ibv_wc& wc) {
  const Work kind = work_kind(wc.wr_id);
  if (kind == Work::AnnounceSend) {
    --sends_in_flight_;
    return;
  }
  if (kind == Work::FlushRead) {
    IbRequest& r = requests_[work_index(wc.wr_id) % kMaxRequests];
    if (r.busy && r.kind == IbRequest::Kind::Flush) r.pending = 0;
    return;
  }
  if (kind != Work::DataRecv || failure_.failed()) return;
  const int q = work_qp(wc.wr_id);
  Status st = post_data_receive(q);  // at once: the peer may write again as soon as it has a slot
  if (!st.ok()) {
    failure_.set(st);
    return;
  }
  if (q >= nqps() || expecting_[q].empty() || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
    failure_.set(error(Code::kRemoteError, "peer " + connection_.peer + " wrote on queue pair " + std::to_string(q) +
                                               " with no receive expecting it"));
    return;
  }
  IbRequest* r = expecting_[q].front();
  expecting_[q].pop_front();
  const uint32_t imm = be32toh(wc.imm_data);
  if (imm & kImmTooLarge) {
    r->too_large = true;
  } else if (r->pending < r->used_qps && r->size != imm) {
    failure_.set(error(Code::kRemoteError, "peer " + connection_.peer + " announced two sizes for one message (" +
                                               std::to_string(r->size) + " and " + std::to_string(imm) + ")"));
    return;
  } else {
    r->size = imm;
  }
  if (--r->pending == 0) landed(r->sequence);
}

Status IbRecvComm::test(IbRequest* r, Completion* out) {
  *out = Completion{};
  if (!r->busy) return error(Code::kInvalidUsage, "test of a request that is not outstanding");
  progress();
  if (r->kind == IbRequest::Kind::Flush) {
    // Its read references the region: it ends (done or flushed) before the region may go.
    if (r->pending == 0 && !r->work_failed) return finish(r, out);
    if (r->pending > 0 && (!failure_.failed() || flushes_will_come())) return ok_status();
    r->busy = false;
    return failure_.surface();
  }
  if (r->pending == 0) {
    if (r->too_large)
      return report(r, error(Code::kInvalidUsage,
                             "peer " + connection_.peer + " sent a message larger than the " + bytes_text(r->capacity) +
                                 " receive posted for it: a send larger than its receive is an error"));
    if (r->kind == IbRequest::Kind::Recv && r->size > r->capacity)
      return report(r, error(Code::kRemoteError, "peer " + connection_.peer + " wrote " + bytes_text(r->size) +
                                                     " into a " + bytes_text(r->capacity) + " receive"));
    return finish(r, out);
  }
  if (failure_.failed()) {
    r->busy = false;
    return failure_.surface();
  }
  return ok_status();
}

Status IbRecvComm::create_loopback() {
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = kSendDepth;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = verbs().create_qp(config_.device->pd(), &init);
  if (!qp)
    return error(Code::kSystemError,
                 "ibv_create_qp (flush loopback) on " + config_.device->name() + " failed: " + errno_text(errno));
  Status st = qp_to_init(verbs(), qp, config_.port);
  SetupInfo self = local_setup();
  const uint32_t psn = random_psn();
  if (st.ok()) st = qp_to_rts(verbs(), qp, config_.port, psn, self, qp->qp_num, psn, config_.service, config_.retry);
  if (!st.ok()) {
    verbs().destroy_qp(qp);
    return error(st.code(), st.message() + " (flush loopback on " + config_.port.name + ")");
  }
  loopback_ = qp;
  device_objects_.push_back(qp);
  return ok_status();
}

Status IbRecvComm::flush(void* data, size_t size, MemoryRegion* region, Request** request) {
  *request = nullptr;
  if (failure_.failed()) return failure_.surface();
  auto* ib_region = dynamic_cast<IbRegion*>(region);
  // Host memory is coherent with the NIC's writes: only GPU memory needs the read.
  if (!ib_region || !ib_region->gpu() || size == 0) return ok_status();
  if (!ib_region->covers(reinterpret_cast<uintptr_t>(data), size))
    return error(Code::kInvalidUsage, "flush: the " + bytes_text(size) + " are not inside the region given");
  if (!loopback_)  // GPU memory registered where the transport did not report taking it
    return error(Code::kInvalidUsage, "flush on the comm from " + connection_.peer + ": " + config_.port.name +
                                          " was not reported to take GPU memory, so the comm has no flush queue pair");
  IbRequest* r = free_request();
  if (!r)
    return error(Code::kInternalError, "flush on the comm from " + connection_.peer + ": " +
                                           std::to_string(kMaxRequests) + " requests already outstanding");
  r->kind = IbRequest::Kind::Flush;
  r->pending = 1;
  // Reading back a few bytes through the NIC orders the NIC's earlier writes into that memory
  // before the read's completion (what NCCL does for GPUDirect RDMA).
  ibv_sge sge{reinterpret_cast<uintptr_t>(flush_target()), static_cast<uint32_t>(std::min<size_t>(size, 4)),
              control_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = work_id(Work::FlushRead, r->index, 0);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(data);
  wr.wr.rdma.rkey = ib_region->rkey();
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(loopback_, &wr, &bad);
  if (rc != 0) {
    r->busy = false;
    return fail(
        error(Code::kSystemError, "ibv_post_send (flush read) on " + config_.port.name + " failed: " + errno_text(rc)));
  }
  *request = r;
  return ok_status();
}

}  // namespace sieve::net::ib
