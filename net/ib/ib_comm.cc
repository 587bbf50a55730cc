// SPDX-License-Identifier: Apache-2.0
// The shared part of a verbs comm's life before and after its data path: creating the completion
// queue, queue pairs and control buffers, connecting them to the peer, the request slots and
// registrations, and the teardown. The data path is in ib_send_comm.cc and ib_recv_comm.cc; polling,
// liveness and failure in ib_comm_progress.cc.
#include "net/ib/ib_comm.h"

#include <cerrno>
#include <cstring>

#include "net/ib/ib_comm_protocol.h"
#include "net/socket.h"

namespace sieve::net::ib {

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
                                          (remote.link_layer == LinkLayer::kEthernet ? "RoCE" : "InfiniBand") + ", " +
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

}  // namespace sieve::net::ib
