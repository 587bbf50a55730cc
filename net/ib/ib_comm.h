// SPDX-License-Identifier: Apache-2.0
// The verbs send and receive comms. Receiver-driven: each irecv tells the sender where its buffer
// is (a SEND on queue pair 0 carrying sequence, address, rkey and capacity, consumed by receives the
// sender keeps posted); the sender, once it has both its isend and that slot, RDMA-writes the
// message straight into the buffer, split across the connection's queue pairs when the receive is
// large, each queue pair's write carrying an immediate (the message size, or "too large"). The
// receive is done when every expected immediate arrived. Completions are polled from test();
// the bootstrap socket stays open as the liveness channel.
// Defined in four files by lifecycle, as NCCL's net_ib is split: ib_comm.cc (set-up, connect,
// teardown), ib_comm_progress.cc (polling, liveness, failure), ib_send_comm.cc and ib_recv_comm.cc
// (each side's data path); ib_comm_protocol.h holds what they share.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "net/connection.h"
#include "net/ib/device_context.h"
#include "net/ib/ib_gid.h"
#include "net/ib/ib_memory.h"
#include "net/ib/ib_setup.h"
#include "net/ib/verbs_library.h"
#include "net/transport.h"

namespace sieve::net::ib {

// Messages above this size per queue pair are split; the receiver's capacity decides the split so
// both sides know how many immediates a message brings before its size is known.
constexpr size_t kSplitBytesPerQp = 128 * 1024;
// A message split across queue pairs is cut on multiples of this: the queue pairs deliver
// independently, so a 128-byte LL128 line (or an LL flag/data pair) split between two of them could
// land its flag before its data (NCCL's net_ib aligns its splits on 128 bytes for this reason).
constexpr size_t kQpSplitAlign = 128;
// Immediates carry the message size, so one message is below 2 GiB; the port's max_msg_sz may say
// less (mlx5: 1 GiB), and the lower is reported as maxP2pBytes.
constexpr uint64_t kMaxMessageBytes = (uint64_t(1) << 31) - 1;

// Under adaptive routing, messages above this size send their immediate in a zero-byte write of its
// own, behind the data (NCCL_IB_AR_THRESHOLD's default; SIEVE_IB_AR_THRESHOLD sets it).
constexpr size_t kAdaptiveRoutingBytes = 8192;

struct IbCommConfig {
  std::shared_ptr<DeviceContext> device;
  PortAddress port;
  // The port as discovered and the GID policy: the GID is chosen again from the port's table at
  // each connect (ib_gid.h). Null: `port` is used as it is (tests that build a config by hand).
  std::shared_ptr<const IbPort> port_info;
  GidPolicy gid_policy;
  // The device's registrations, shared by all its comms (ib_memory.h). Null: the comm keeps its own.
  std::shared_ptr<RegionTable> registrations;
  ServiceClass service;  // a listener's becomes the connector's at set-up
  RetryBudget retry;
  int nqps = 1;
  int peer_timeout_ms = 5000;
  int max_cqe = 0;                                // the device's limit (0: unknown)
  uint64_t max_message_bytes = kMaxMessageBytes;  // the port's limit, if lower (reported as maxP2pBytes)
  bool relaxed_ordering = true;
  size_t adaptive_routing_bytes = kAdaptiveRoutingBytes;
  bool adaptive_routing = false;  // the fabric may reorder one write's packets: see kAdaptiveRoutingBytes  // NCCL's
                                  // registrations may be written out of PCIe order
  bool gpu_flush =
      false;  // the device takes GPU memory (dma-buf or peermem): receive comms make their flush queue pair at set-up
};

class IbComm;

// One outstanding isend, irecv or flush. Slots are reused once test has reported them done.
struct IbRequest final : Request {
  Status test(Completion* out) override;
  void* comm_tag() const override;

  enum class Kind { kSend, kRecv, kFlush };
  IbComm* owner = nullptr;
  uint32_t index = 0;
  bool busy = false;
  Kind kind = Kind::kSend;
  char* data = nullptr;
  size_t size = 0;      // send: its size; receive: the size the immediates reported
  size_t capacity = 0;  // receive: the posted size
  uint64_t sequence = 0;
  uint32_t lkey = 0, rkey = 0;
  int used_qps = 0;     // queue pairs this message travels on
  int pending = 0;      // completions still expected (writes, immediates, the flush read)
  bool posted = false;  // send: writes posted
  bool too_large = false;
  bool work_failed = false;  // one of its work requests completed in error
  Status error;              // this request's own failure (a send larger than the receive)
};

// What send and receive comms share: the queue pairs, the completion queue, the control buffers,
// the liveness socket, the first failure and the request slots.
class IbComm {
 public:
  IbComm(IbCommConfig config, Connection connection);
  virtual ~IbComm();
  IbComm(const IbComm&) = delete;
  IbComm& operator=(const IbComm&) = delete;

  // Creates the completion queue, the queue pairs (in INIT) and the control buffers.
  Status create();
  SetupInfo local_setup() const;
  // Whether this side can reach the peer at all (link layer, partition): an error that names why.
  Status check_peer(const SetupInfo& remote) const;
  // RTR and RTS towards the peer (check_peer first), then the receives this side keeps posted.
  Status connect(const SetupInfo& remote);
  int nqps() const { return config_.nqps; }
  int socket() const { return connection_.control.get(); }

  virtual Status test(IbRequest* request, Completion* out) = 0;
  void* tag() const { return tag_; }
  const std::string& peer_name() const { return connection_.peer; }
  Status register_region(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out);

 protected:
  IbRequest* free_request();
  // Polls the completion queue and the liveness socket; records the first failure.
  void progress();
  virtual void on_completion(const ibv_wc& wc) = 0;
  // What a side needs before the peer may send: the receives it keeps posted (and a receive comm's
  // flush queue pair, where it has one).
  virtual Status prepare() = 0;
  Status finish(IbRequest* request, Completion* out);
  // A request's own error (logged here, with the peer) or the comm's failure.
  Status report(IbRequest* request, const Status& status);
  Status fail(const Status& status);
  // The registration covering [data, data+size), or InvalidUsage naming the call.
  Status find_region(const char* call, const void* data, size_t size, uint32_t* lkey, uint32_t* rkey) const;
  Status post_send(int qp, ibv_send_wr* wr);
  Status post_recv(int qp, ibv_recv_wr* wr);
  // Reads the liveness socket (at a bounded rate unless `now`): a close or error fails the comm
  // after kCloseGrace; a send comm also takes the receiver's goodbye there.
  void check_liveness(bool now = false);
  // Asks the device whether its asynchronous events broke this comm (fatal device error, its queue
  // pairs or completion queue failed), at a bounded rate. A port going down is not among them: the
  // queue pairs' retry budget decides.
  void check_device();
  // Whether work requests still queued will complete (flushed) after enter_error: not on a device
  // that had a fatal error, which completes nothing more and writes nothing more either.
  bool flushes_will_come() const { return in_error_ && !device_lost_; }
  // A failed work request the comm may ignore: a write whose message the peer reported as landed
  // before it closed (its acknowledgement went with the peer's queue pair).
  virtual bool landed_before_close(const ibv_wc& wc) {
    (void)wc;
    return false;
  }
  // Once failed, every queue pair goes to the error state, so the hardware flushes whatever is
  // still queued (each with its completion) and writes nothing more into registered memory. A
  // request is reported failed only when none of its work requests can still touch its buffer.
  void enter_error();
  // The request a completion belongs to, or null (announcements, receives of immediates).
  IbRequest* request_of(const ibv_wc& wc);
  // The `used` queue pairs a message travels on, from next_qp_ (below), which moves past them.
  std::vector<int> take_qps(int used);
  // The comm's failure for a completion in error: status, queue pairs, GIDs, hint (completion_error.h).
  std::string describe_failed(const ibv_wc& wc) const;

  const VerbsLibrary& verbs() const { return config_.device->verbs(); }

  // Control buffer layout: slot announcements (kMaxRequests) then the flush target.
  static constexpr size_t kAnnounceBytes = 32;
  uint8_t* announce(uint32_t i) { return control_.data() + i * kAnnounceBytes; }
  uint8_t* flush_target() { return control_.data() + kMaxRequests * kAnnounceBytes; }

  IbCommConfig config_;
  Connection connection_;
  Failure failure_;
  std::shared_ptr<RegionTable> regions_;     // the device's (config_.registrations)
  std::shared_ptr<RegionList> own_regions_;  // those made on this comm: looked up first
  std::array<IbRequest, kMaxRequests> requests_;
  void* tag_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::vector<ibv_qp*> qps_;
  // The queue pair the next message starts on: each message takes the next qps_for() queue pairs
  // after the previous one's, so small messages (one queue pair each) rotate over all of them as
  // NCCL's do. Both sides advance it in message order (the receiver at irecv, the sender as it
  // matches slots, which come in that order), so they agree without telling each other.
  int next_qp_ = 0;
  ibv_qp* loopback_ = nullptr;  // receive comms: the queue pair connected to itself that flushes read through
  bool in_error_ = false;
  bool device_lost_ = false;
  std::vector<const void*> device_objects_;  // the completion queue and queue pairs, for check_device
  Clock::time_point next_device_check_{};
  std::vector<uint32_t> psn_;
  ibv_gid remote_gid_{};               // the peer's, from set-up: for error messages
  std::vector<uint32_t> remote_qpns_;  // the peer's queue pair behind each of qps_
  PageBuffer control_;                 // whole pages of its own: see ib_memory.h
  ibv_mr* control_mr_ = nullptr;
  Clock::time_point next_liveness_check_{};
  Clock::time_point peer_closed_at_{};
  bool peer_closed_ = false;
  std::string peer_closed_reason_;
  // Graceful close: a receive comm writes {magic, messages landed} on the socket before its queue
  // pairs go, so its sender can complete the sends whose acknowledgements die with them.
  static constexpr size_t kGoodbyeBytes = 12;
  bool expects_goodbye_ = false;  // send comms
  uint8_t goodbye_[kGoodbyeBytes] = {};
  size_t goodbye_read_ = 0;
  bool peer_said_goodbye_ = false;
  uint64_t peer_landed_ = 0;  // messages 0..peer_landed_-1 are in the receiver's buffers
};

class IbSendComm final : public SendComm, public IbComm {
 public:
  IbSendComm(IbCommConfig config, Connection connection) : IbComm(std::move(config), std::move(connection)) {
    expects_goodbye_ = true;
  }
  Status isend(const void* data, size_t size, Request** request) override;
  Status test(IbRequest* request, Completion* out) override;
  const std::string& peer() const override { return connection_.peer; }
  void set_tag(void* tag) override { tag_ = tag; }
  Status register_memory(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out) override {
    return register_region(memory, out);
  }

 private:
  struct Slot {  // a receive the peer announced
    uint64_t sequence;
    uint64_t address;
    uint64_t capacity;
    uint32_t rkey;
  };
  void on_completion(const ibv_wc& wc) override;
  bool landed_before_close(const ibv_wc& wc) override;
  Status prepare() override;
  Status post_announce_receive(uint32_t i);
  // Pairs waiting sends with announced slots, in order, and posts their writes.
  void match();
  Status post_writes(IbRequest* request, const Slot& slot);

  uint64_t next_send_sequence_ = 0;
  uint64_t next_slot_sequence_ = 0;
  std::deque<IbRequest*> waiting_;  // sends without a slot yet, in sequence order
  std::deque<Slot> slots_;          // announced slots without a send yet
};

class IbRecvComm final : public RecvComm, public IbComm {
 public:
  using IbComm::IbComm;
  ~IbRecvComm() override;
  Status irecv(void* data, size_t capacity, Request** request) override;
  Status test(IbRequest* request, Completion* out) override;
  const std::string& peer() const override { return connection_.peer; }
  void set_tag(void* tag) override { tag_ = tag; }
  Status register_memory(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out) override {
    return register_region(memory, out);
  }
  Status flush(void* data, size_t size, MemoryRegion* region, Request** request) override;

 private:
  void on_completion(const ibv_wc& wc) override;
  Status prepare() override;
  Status post_data_receive(int qp);
  // The queue pair connected to itself that flushes read through: made at set-up where the device
  // takes GPU memory, so the first flush does not create and connect a queue pair in the data path.
  Status create_loopback();

  void landed(uint64_t sequence);

  uint64_t next_sequence_ = 0;
  uint64_t landed_ = 0;                            // every message below this one has all its immediates
  std::set<uint64_t> landed_ahead_;                // landed past a message still arriving (several queue pairs)
  std::vector<std::deque<IbRequest*>> expecting_;  // per queue pair: receives awaiting its immediate, in order
  int sends_in_flight_ = 0;                        // announcements not yet completed (bounded by the send queue)
};

}  // namespace sieve::net::ib
