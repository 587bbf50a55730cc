// SPDX-License-Identifier: Apache-2.0
// The one internal interface of Sieve's transport. plugin/ wraps it in NCCL's versioned ABI tables;
// tests and tools drive it directly. No NCCL types here: sizes are size_t, results are Status.
//
// NCCL's rules hold for every call: nothing blocks (listen/connect/accept return a null comm until
// ready and are called again with the same handle), isend/irecv return a null request when
// kMaxRequests are outstanding, a receive may be posted larger than the send (test reports the real
// size), and a send larger than the posted receive is an error, never an overflow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/devices.h"
#include "net/status.h"
#include "topology/discover.h"
#include "topology/pinning.h"

namespace sieve::net {

constexpr int kMaxRequests = 32;     // outstanding requests per comm (NCCL_NET_MAX_REQUESTS)
constexpr size_t kHandleSize = 128;  // NCCL_NET_HANDLE_MAXSIZE
constexpr int kMaxSockets = 16;

struct TransportOptions {
  DeviceFilter devices;
  int nsocks = 0;    // data sockets per connection; 0: by link speed (stripe_shape)
  int nthreads = 0;  // helper threads per connection (<= nsocks); 0: half the sockets
  // Who moves the data sockets' bytes. Inline: the caller's thread, inside isend/irecv/test (NCCL's
  // proxy thread), in bounded steps; no helper thread to hand off to or to compete with for a core.
  // Helpers: helper threads. Auto: helpers (see inline_progress for the measurements).
  enum class Progress { kAuto, kInline, kHelpers };
  Progress progress = Progress::kAuto;
  size_t chunk_size = 512 * 1024;       // largest stripe of a message on one data socket
  size_t inline_threshold = 64 * 1024;  // messages up to this size travel on the control socket
  std::string job_token;                // empty: no authentication beyond the listener's nonce
  int peer_timeout_ms = 5000;           // handshake deadline; silence allowed mid-transfer
  topology::Options topology;           // where NICs sit (SIEVE_TOPO_FILE pins an hwloc XML)
  // Helper threads run on their NIC's local CPUs; Auto pins only on machines with several NUMA nodes.
  topology::PinChoice pin_threads = topology::PinChoice::kAuto;
  // Zero-eliding codec on the data sockets. Off: the capability is not offered (peers send raw).
  // Auto: a stripe is encoded only when a sample says it pays. On: every stripe is encoded.
  enum class Codec { kOff, kAuto, kOn };
  Codec codec = Codec::kAuto;
  bool offer_codec = true;      // false: behave as a peer that predates the codec (tests)
  int64_t rate_limit_mbps = 0;  // per device, shared by all connections of this transport; 0 = off
  // Verbs transport (net/ib/) only.
  std::string ib_hca;     // SIEVE_IB_HCA, NCCL_IB_HCA's syntax; empty: every active port
  int ib_gid_index = -1;  // RoCE ports only; -1: chosen per port (ib::select_gid)
  // What the automatic GID choice keeps to on RoCE ports: an address family, and a range
  // ("10.1.0.0/16", "fd00::/8"; "" for none), NCCL_IB_ADDR_FAMILY / NCCL_IB_ADDR_RANGE's meaning.
  Family ib_addr_family = Family::kAny;
  std::string ib_addr_range;
  int ib_qps = 1;  // queue pairs per connection
  // The class of service of a connection, chosen by the connecting side (the listener adopts it):
  // -1 leaves it to the communicator's traffic class (connect's), else 0.
  int ib_traffic_class = -1;  // 0-255: the GRH traffic class (RoCE: DSCP << 2 | ECN)
  int ib_service_level = -1;  // 0-15; the communicator's traffic class serves only when it is 0-15
  int ib_pkey_index = 0;      // P_Key table index of every queue pair; both sides' partitions must match
  bool ib_relaxed_ordering = true;
  int ib_adaptive_routing = -1;  // 1: immediates of large messages in writes of their own; -1: on InfiniBand only  //
                                 // IBV_ACCESS_RELAXED_ORDERING on NCCL's registrations
  int ib_timeout = 20;           // queue-pair retry timeout, 4.096 us x 2^n per try (1-31)
  int ib_retry_count = 7;        // tries after the first before "retry exceeded" (0-7)
  // Under adaptive routing, messages above this many bytes carry their immediate in a zero-byte
  // write of its own behind the data (NCCL_IB_AR_THRESHOLD's meaning and default).
  int64_t ib_ar_threshold = 8192;
};

// NCCL's "no traffic class" (NCCL_NET_TRAFFIC_CLASS_UNDEF), for connect without a communicator's.
constexpr int kTrafficClassUnset = -1;

// How many data sockets and helper threads a connection gets. One TCP stream fills a link below
// about 25 Gbit/s with the least CPU and no cross-stream stalls (measured on tbf-shaped 1 and
// 10 Gbit/s veth: 4 striped sockets ran 3-20 % slower), which is also NCCL's own socket default;
// faster links need several streams and threads. Cloud NICs cap each flow, whatever the link speed,
// so there Sieve follows the shapes NCCL's socket transport picks by PCI vendor (net_socket.cc,
// 2.28): AWS ENA (a 5 Gbit/s per-flow limit outside cluster placement groups) 16 sockets on 2
// threads, GCP gVNIC 4 sockets on 4 threads. Explicit settings win.
constexpr int kStripedLinkMbps = 25000;
constexpr uint16_t kPciVendorAws = 0x1d0f;  // Elastic Network Adapter
constexpr uint16_t kPciVendorGcp = 0x1ae0;  // gVNIC
struct StripeShape {
  int nsocks;
  int nthreads;  // helper threads when not inline
  bool inline_progress = false;
};
inline int auto_nthreads(int nsocks) { return (nsocks + 1) / 2; }
// Whether a connection's data sockets are moved on the caller's thread. Auto never picks inline:
// measured with a spinning and a sleeping driver, idle and with 2 busy threads, on 1 and 10 Gbit/s
// and unshaped veth (docs/PERFORMANCE.md, "Inline progress"), helper threads matched inline
// throughput at 1 Gbit/s and beat it everywhere else (up to 2x), on busy nodes too. Inline stays
// an explicit choice (SIEVE_PROGRESS=inline), for nodes where a thread per connection is unwelcome.
inline bool inline_progress(const TransportOptions& o, int /*nsocks*/) {
  return o.progress == TransportOptions::Progress::kInline;
}
inline StripeShape stripe_shape(const TransportOptions& o, int link_mbps, uint16_t pci_vendor) {
  StripeShape shape{link_mbps >= kStripedLinkMbps ? 4 : 1, 0};
  if (pci_vendor == kPciVendorAws) shape = {16, 2};
  if (pci_vendor == kPciVendorGcp) shape = {4, 4};
  if (o.nsocks > 0) shape = {o.nsocks, 0};
  shape.nthreads = o.nthreads > 0 ? o.nthreads : shape.nthreads > 0 ? shape.nthreads : auto_nthreads(shape.nsocks);
  shape.inline_progress = inline_progress(o, shape.nsocks);
  return shape;
}

// Opaque to NCCL; produced by listen, carried by NCCL's bootstrap to the connecting side.
struct Handle {
  unsigned char bytes[kHandleSize];
};

// What test reports once a request is done.
struct Completion {
  bool done = false;
  size_t size = 0;          // bytes really sent / received
  uint64_t wire_bytes = 0;  // bytes on the wire for this message, frame headers included
  bool sent = false;        // true for a send request, false for a receive
  bool message = true;      // false for a flush: no message moved, nothing to count
};

// A buffer registered with a comm (NCCL's regMr takes a comm, and so does Sieve). The verbs transport
// keeps a memory region here; TCP needs none (its default registration is empty). Dropping it
// deregisters, so the caller owns the registration's lifetime, as NCCL's deregMr does.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
};

// What register_memory is asked to register: host memory by address, GPU memory by its device
// address (where the transport reports Device::cuda_pointers: nvidia-peermem resolves it), or
// memory exported as a dma-buf (GPU memory), named by its fd and the offset of `data` within it.
struct MemoryDescriptor {
  void* data = nullptr;
  size_t size = 0;
  int dmabuf_fd = -1;  // -1: not a dma-buf
  uint64_t dmabuf_offset = 0;
  bool cuda = false;  // `data` is a CUDA device pointer (NCCL_PTR_CUDA)
  bool is_dmabuf() const { return dmabuf_fd >= 0; }
  bool is_gpu() const { return cuda || is_dmabuf(); }
};

class Request {
 public:
  // Progresses the request's comm; on done, the request slot is free for reuse.
  virtual Status test(Completion* out) = 0;
  // The tag its comm was given (set_tag), so a caller can account per connection.
  virtual void* comm_tag() const = 0;

 protected:
  ~Request() = default;
};

class SendComm {
 public:
  virtual ~SendComm() = default;
  // *request is null (and Ok returned) when kMaxRequests are outstanding: call again later.
  // A transport that needs registered memory (verbs) finds the registration covering
  // [data, data+size) among this comm's; an unregistered buffer is InvalidUsage.
  virtual Status isend(const void* data, size_t size, Request** request) = 0;
  virtual const std::string& peer() const = 0;
  virtual void set_tag(void* tag) = 0;
  // Default (TCP): host memory needs no registration, a dma-buf cannot be carried.
  virtual Status register_memory(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out);
};

class RecvComm {
 public:
  virtual ~RecvComm() = default;
  virtual Status irecv(void* data, size_t capacity, Request** request) = 0;
  virtual const std::string& peer() const = 0;
  virtual void set_tag(void* tag) = 0;
  virtual Status register_memory(const MemoryDescriptor& memory, std::unique_ptr<MemoryRegion>* out);
  // Makes received data visible to the device that owns `region`'s memory (GPUDirect). *request is
  // null when there is nothing to flush: host memory, and TCP always.
  virtual Status flush(void* data, size_t size, MemoryRegion* region, Request** request);
};

class ListenComm {
 public:
  virtual ~ListenComm() = default;
  // *comm stays null until a peer has completed the handshake. Bad or silent clients are dropped.
  virtual Status accept(std::unique_ptr<RecvComm>* comm) = 0;
  // Connections dropped (stray, garbage, wrong nonce or token, too slow) since the last call.
  virtual uint64_t take_rejected() = 0;
};

// Why a TCP-only build (configured without rdma-core's headers: CMake's SIEVE_VERBS) has no verbs.
constexpr const char* kVerbsNotBuilt =
    "this build of Sieve has no verbs transport (TCP only: configured without infiniband/verbs.h; rebuild with "
    "libibverbs-dev installed)";

class Transport {
 public:
  virtual ~Transport() = default;

  static Status create_tcp(const TransportOptions& options, std::unique_ptr<Transport>* out);
  // InfiniBand / RoCE verbs (net/ib/). Error when libibverbs does not load or no selected port is active,
  // or when this build has no verbs transport (kVerbsNotBuilt says so).
  static Status create_ib(const TransportOptions& options, std::unique_ptr<Transport>* out);
  // SIEVE_TRANSPORT's rule, applied by the plugin and restated by sieve-info from the same inputs:
  // Tcp is TCP, Ib is verbs (`verbs_usable` false makes that the caller's error), Auto takes
  // verbs when usable. `verbs_problem` says why verbs are not usable; `active_ports` how many
  // selected ports are. `why` is the reason in the words the plugin logs and sieve-info prints.
  struct Choice {
    bool verbs = false;
    std::string why;
  };
  enum class Asked { kAuto, kTcp, kIb };
  static Choice choose(Asked asked, bool verbs_usable, size_t active_ports, const std::string& verbs_problem);

  virtual const std::vector<Device>& devices() const = 0;
  virtual Status listen(int dev, Handle* handle, std::unique_ptr<ListenComm>* comm) = 0;
  // Writes its in-progress state into *handle: NCCL calls again with the same handle until *comm is set.
  // `traffic_class`: the communicator's (NCCL's ncclConfig_t trafficClass), kTrafficClassUnset when
  // it set none; verbs use it where SIEVE_IB_TC / SIEVE_IB_SL leave the choice open, TCP ignores it.
  virtual Status connect(int dev, int traffic_class, Handle* handle, std::unique_ptr<SendComm>* comm) = 0;
  Status connect(int dev, Handle* handle, std::unique_ptr<SendComm>* comm) {
    return connect(dev, kTrafficClassUnset, handle, comm);
  }
};

}  // namespace sieve::net
