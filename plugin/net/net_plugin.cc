// SPDX-License-Identifier: Apache-2.0
#include "plugin/net/net_plugin.h"

#include <sys/resource.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <type_traits>

#include "net/job_token.h"
#include "net/log.h"
#include "net/transport.h"
#include "plugin/config.h"
#include "plugin/net/nccl_fallbacks.h"
#include "plugin/net/peer_traffic.h"
#include "plugin/process_log.h"
#include "plugin/proxy_probe.h"
#include "plugin/stats.h"
#include "plugin/stats_export.h"

namespace sieve::plugin {

namespace {

using abi::ncclInternalError;
using abi::ncclInvalidArgument;
using abi::ncclInvalidUsage;
using abi::ncclRemoteError;
using abi::ncclSuccess;
using abi::ncclSystemError;

struct ProcessState {
  net::TransportOptions options;
  std::unique_ptr<net::Transport> transport;
  bool verbs = false;  // the verbs transport carries the data (else TCP)
};

// The shared state and its references; comms hold their own shared_ptr so a finalize racing a
// late close never frees the transport under them.
std::mutex g_mutex;
std::shared_ptr<ProcessState> g_state;
int g_references = 0;
bool g_legacy_reference = false;
// Connections open in this process. When the last one closes, the traffic so far is final until
// NCCL connects again: write it, so the file is right even if the process then ends with _exit or
// is killed (NCCL's v8-v10 have no finalize; a v11+ finalize may never come).
std::atomic<int> g_open_comms{0};

void comm_closed() {
  if (g_open_comms.fetch_sub(1) == 1) write_stats_export();
}

struct Context {
  std::shared_ptr<ProcessState> state;
  uint64_t comm_id = 0;
  int traffic_class = -1;
};

struct ListenWrapper {
  std::shared_ptr<ProcessState> state;
  std::unique_ptr<net::ListenComm> comm;
  int dev = 0;
};
// Send and receive comms share one wrapper type: regMr and deregMr take either.
struct CommWrapper {
  std::shared_ptr<ProcessState> state;
  int dev = 0;
  std::unique_ptr<net::SendComm> send;  // exactly one of send and recv is set
  std::unique_ptr<net::RecvComm> recv;
  std::shared_ptr<CommTraffic> traffic;

  net::Status register_memory(const net::MemoryDescriptor& memory, std::unique_ptr<net::MemoryRegion>* out) {
    return send ? send->register_memory(memory, out) : recv->register_memory(memory, out);
  }
};

template <typename Comm> CommWrapper* wrap(std::shared_ptr<ProcessState> state, std::unique_ptr<Comm> comm, int dev) {
  auto traffic = register_comm_traffic(state->transport->devices()[dev].name, comm->peer());
  comm->set_tag(traffic.get());
  auto wrapper = new CommWrapper{std::move(state), dev, nullptr, nullptr, std::move(traffic)};
  g_open_comms.fetch_add(1);
  if constexpr (std::is_same_v<Comm, net::SendComm>) wrapper->send = std::move(comm);
  else wrapper->recv = std::move(comm);
  return wrapper;
}

ncclResult_t to_nccl(net::Code code) {
  switch (code) {
    case net::Code::kOk: return ncclSuccess;
    case net::Code::kInvalidArgument: return ncclInvalidArgument;
    case net::Code::kInvalidUsage: return ncclInvalidUsage;
    case net::Code::kSystemError: return ncclSystemError;
    case net::Code::kRemoteError: return ncclRemoteError;
    case net::Code::kInternalError: return ncclInternalError;
  }
  return ncclInternalError;
}

ncclResult_t report(const char* call, const net::Status& st) {
  if (st.ok()) return ncclSuccess;
  SIEVE_WARN("%s failed (%s): %s", call, net::code_name(st.code()), st.message().c_str());
  return to_nccl(st.code());
}

// Runs an entry point body; no exception may cross NCCL's C boundary.
template <typename Body> ncclResult_t guarded(const char* call, Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    SIEVE_WARN("%s: out of memory", call);
    return ncclSystemError;
  } catch (const std::exception& e) {
    SIEVE_WARN("%s: %s", call, e.what());
    return ncclInternalError;
  } catch (...) {
    SIEVE_WARN("%s: unknown exception", call);
    return ncclInternalError;
  }
}

net::Transport::Asked transport_asked(config::TransportChoice choice) {
  switch (choice) {
    case config::TransportChoice::kTcp: return net::Transport::Asked::kTcp;
    case config::TransportChoice::kIb: return net::Transport::Asked::kIb;
    case config::TransportChoice::kAuto: break;
  }
  return net::Transport::Asked::kAuto;
}

net::TransportOptions options_from(const config::Registry& registry) {
  const config::Settings& s = registry.settings();
  net::TransportOptions o;
  o.devices.ifname = s.socket_ifname;
  switch (s.socket_family) {
    case config::SocketFamily::kAny: o.devices.family = net::Family::kAny; break;
    case config::SocketFamily::kIpv4: o.devices.family = net::Family::kIPv4; break;
    case config::SocketFamily::kIpv6: o.devices.family = net::Family::kIPv6; break;
  }
  o.nsocks = static_cast<int>(s.nsocks);
  o.nthreads = static_cast<int>(s.nthreads);
  o.chunk_size = s.chunk_size;
  o.inline_threshold = s.inline_threshold;
  o.job_token = s.job_token;
  o.peer_timeout_ms = static_cast<int>(std::min<int64_t>(s.peer_timeout_ms, INT_MAX));
  o.topology.xml_file = s.topo_file;
  switch (s.pin_threads) {
    case config::PinThreads::kAuto: o.pin_threads = topology::PinChoice::kAuto; break;
    case config::PinThreads::kOn: o.pin_threads = topology::PinChoice::kOn; break;
    case config::PinThreads::kOff: o.pin_threads = topology::PinChoice::kOff; break;
  }
  switch (s.progress) {
    case config::Progress::kAuto: o.progress = net::TransportOptions::Progress::kAuto; break;
    case config::Progress::kInline: o.progress = net::TransportOptions::Progress::kInline; break;
    case config::Progress::kHelpers: o.progress = net::TransportOptions::Progress::kHelpers; break;
  }
  switch (s.wire_codec) {
    case config::WireCodec::kAuto: o.codec = net::TransportOptions::Codec::kAuto; break;
    case config::WireCodec::kOn: o.codec = net::TransportOptions::Codec::kOn; break;
    case config::WireCodec::kOff: o.codec = net::TransportOptions::Codec::kOff; break;
  }
  o.rate_limit_mbps = s.rate_limit_mbps;
  // The verbs settings NCCL's IB transport has too: SIEVE_IB_*, else NCCL_IB_*, else the default.
  const std::vector<SharedSetting> decided = resolve_ib_options(registry, std::getenv, &o);
  for (const SharedSetting& d : decided)
    if (d.origin == Origin::kNccl)
      SIEVE_INFO("%s=%s from %s (%s unset)", d.sieve_name, d.value.c_str(), d.nccl_name, d.sieve_name);
  return o;
}

// SIEVE_TRANSPORT: ib is ib or an error (a job that asked for RDMA must not quietly run on TCP);
// auto takes ib when libibverbs loads and a selected port is active, and says which and why.
// `why` is that reason, for the lines that follow.
net::Status create_transport(config::TransportChoice choice_asked, ProcessState* state, std::string* why) {
  const net::Transport::Asked asked = transport_asked(choice_asked);
  net::Status verbs = net::error(net::Code::kInvalidUsage, "not tried");
  if (asked != net::Transport::Asked::kTcp) verbs = net::Transport::create_ib(state->options, &state->transport);
  if (asked == net::Transport::Asked::kIb && !verbs.ok())
    return net::error(verbs.code(), "SIEVE_TRANSPORT=ib: " + verbs.message());
  const net::Transport::Choice choice =
      net::Transport::choose(asked, verbs.ok(), verbs.ok() ? state->transport->devices().size() : 0, verbs.message());
  *why = choice.why;
  state->verbs = choice.verbs;
  if (asked != net::Transport::Asked::kTcp) SIEVE_INFO("transport %s (%s)", choice.verbs ? "ib" : "tcp", why->c_str());
  if (choice.verbs) return verbs;
  return net::Transport::create_tcp(state->options, &state->transport);
}

// A variable only the other transport reads does nothing here: say so, rather than let a job run
// believing SIEVE_NSOCKS (or SIEVE_IB_HCA) shapes it. With auto running TCP this is also where a
// user who configured RDMA learns, at the default log level, that it is not in use and why.
void warn_settings_without_effect(const config::Registry& registry, bool verbs, const std::string& why) {
  const config::Scope in_use = verbs ? config::Scope::kVerbs : config::Scope::kTcp;
  const auto unused = registry.set_without_effect(in_use);
  if (!unused.empty()) SIEVE_WARN("%s (%s)", config::without_effect_text(unused, in_use).c_str(), why.c_str());
}

// Takes one reference, creating the state on first use. Caller holds g_mutex.
ncclResult_t acquire_locked(abi::ncclDebugLogger_t logger, std::shared_ptr<ProcessState>* out) {
  if (!g_state) {
    const config::Registry& registry = config::Registry::process();
    install_nccl_logger(logger);
    start_process_log();  // after the logger: NCCL's log is where a job's user looks
    // A weak token gives a false sense of safety: one welcome lets a dictionary find it offline.
    net::Status token = net::check_job_token(registry.settings().job_token);
    if (!token.ok()) return report("init", token);
    auto state = std::make_shared<ProcessState>();
    state->options = options_from(registry);
    std::string why;
    net::Status st = create_transport(registry.settings().transport, state.get(), &why);
    if (!st.ok()) return report("init", st);
    warn_settings_without_effect(registry, state->verbs, why);
    g_state = std::move(state);
    start_stats_export(registry.settings());  // warns itself when it cannot
    const net::TransportOptions& o = g_state->options;
    const auto shape_text = [](int n) { return n > 0 ? std::to_string(n) : std::string("auto"); };
    if (g_state->verbs)
      SIEVE_INFO("initialised: %zu RDMA port(s), %d queue pair(s) per connection%s",
                 g_state->transport->devices().size(), o.ib_qps, o.job_token.empty() ? "" : ", job token required");
    else
      SIEVE_INFO(
          "initialised: %zu device(s), %s sockets x %s threads per connection, progress %s, chunk %zu, "
          "inline <= %zu, wire codec %s%s%s%s",
          g_state->transport->devices().size(), shape_text(o.nsocks).c_str(), shape_text(o.nthreads).c_str(),
          config::choice_text(registry.settings().progress).c_str(), o.chunk_size, o.inline_threshold,
          config::choice_text(registry.settings().wire_codec).c_str(), o.rate_limit_mbps > 0 ? ", rate limit " : "",
          o.rate_limit_mbps > 0 ? (std::to_string(o.rate_limit_mbps) + " Mbit/s per device").c_str() : "",
          o.job_token.empty() ? "" : ", job token required");
    run_proxy_probe();  // NCCL is loaded now: a preloaded proxy can tell whether it will see collectives
  } else if (logger) {
    install_nccl_logger(logger);
  }
  ++g_references;
  *out = g_state;
  return ncclSuccess;
}

void release_locked() {
  if (g_references > 0 && --g_references == 0) {
    g_state.reset();
    g_legacy_reference = false;
    stop_stats_export();  // the final totals, while NCCL's logger can still report a failure
    install_nccl_logger(nullptr);
  } else {
    write_stats_export();  // a communicator's context ends: its traffic is final
  }
}

std::shared_ptr<ProcessState> current_state() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_state;
}

// Property strings must outlive any state: NCCL may keep the pointers. Interned for the process.
const char* intern(const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string>* strings = new std::set<std::string>();  // never freed on purpose
  std::lock_guard<std::mutex> lock(mutex);
  return strings->insert(text).first->c_str();
}

int honest_max_comms(const net::TransportOptions& o, const net::Device& d) {
  rlimit limit{};
  uint64_t fds = 65536;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) fds = limit.rlim_cur;
  uint64_t per_comm = static_cast<uint64_t>(net::stripe_shape(o, d.speed_mbps, d.pci_vendor).nsocks) + 1;
  return static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(65536, fds / per_comm)));
}

void count_completion(const net::Completion& c) {
  ProcessStats& s = process_stats();
  if (c.sent) {
    add(s.bytes_logical_sent, c.size);
    add(s.bytes_wire_sent, c.wire_bytes);
    add(s.messages_sent, 1);
  } else {
    add(s.bytes_logical_received, c.size);
    add(s.bytes_wire_received, c.wire_bytes);
    add(s.messages_received, 1);
  }
}

}  // namespace

int net_state_references() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_references;
}

ncclResult_t net_init(abi::ncclDebugLogger_t logger) {
  return guarded("init", [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_legacy_reference) {
      if (logger) install_nccl_logger(logger);
      return ncclSuccess;
    }
    std::shared_ptr<ProcessState> state;
    ncclResult_t r = acquire_locked(logger, &state);
    if (r == ncclSuccess) g_legacy_reference = true;
    return r;
  });
}

ncclResult_t net_init_context(void** ctx, uint64_t comm_id, int traffic_class, abi::ncclDebugLogger_t logger) {
  return guarded("init", [&] {
    if (!ctx) return ncclInvalidArgument;
    *ctx = nullptr;
    auto context = std::make_unique<Context>();
    std::lock_guard<std::mutex> lock(g_mutex);
    ncclResult_t r = acquire_locked(logger, &context->state);
    if (r != ncclSuccess) return r;
    context->comm_id = comm_id;
    context->traffic_class = traffic_class;
    *ctx = context.release();
    return ncclSuccess;
  });
}

ncclResult_t net_finalize(void* ctx) {
  return guarded("finalize", [&] {
    if (!ctx) return ncclInvalidArgument;
    std::unique_ptr<Context> context(static_cast<Context*>(ctx));
    context->state.reset();
    std::lock_guard<std::mutex> lock(g_mutex);
    release_locked();
    return ncclSuccess;
  });
}

ncclResult_t net_devices(int* ndev) {
  return guarded("devices", [&] {
    auto state = current_state();
    if (!state || !ndev) return ncclInvalidUsage;
    *ndev = static_cast<int>(state->transport->devices().size());
    return ncclSuccess;
  });
}

ncclResult_t net_properties(int dev, DeviceProperties* props) {
  return guarded("getProperties", [&] {
    auto state = current_state();
    if (!state || !props) return ncclInvalidUsage;
    const auto& devices = state->transport->devices();
    if (dev < 0 || dev >= static_cast<int>(devices.size())) {
      SIEVE_WARN("getProperties: device %d does not exist (%zu devices)", dev, devices.size());
      return ncclInvalidArgument;
    }
    const net::Device& d = devices[dev];
    *props = DeviceProperties{};
    props->name = intern(d.name);
    props->pci_path = d.pci_path.empty() ? nullptr : intern(d.pci_path);
    props->guid = d.guid;
    props->port = d.port;
    props->ptr_support =
        abi::NCCL_PTR_HOST | (d.cuda_pointers ? abi::NCCL_PTR_CUDA : 0) | (d.dmabuf ? abi::NCCL_PTR_DMABUF : 0);
    props->speed_mbps = d.speed_mbps;
    props->max_comms = d.max_comms > 0 ? d.max_comms : honest_max_comms(state->options, d);
    props->max_recvs = 1;
    props->reg_is_global = d.global_registration ? 1 : 0;
    const size_t max_bytes =
        d.max_message_bytes > 0 ? std::min<size_t>(kMaxNetSizeBytes, d.max_message_bytes) : kMaxNetSizeBytes;
    props->max_p2p_bytes = max_bytes;
    props->max_coll_bytes = max_bytes;
    return ncclSuccess;
  });
}

ncclResult_t net_listen(void* ctx, int dev, void* handle, void** listen_comm) {
  return guarded("listen", [&] {
    if (!handle || !listen_comm) return ncclInvalidArgument;
    *listen_comm = nullptr;
    auto state = ctx ? static_cast<Context*>(ctx)->state : current_state();
    if (!state) return ncclInvalidUsage;
    auto wrapper = std::make_unique<ListenWrapper>();
    wrapper->state = state;
    wrapper->dev = dev;
    net::Status st = state->transport->listen(dev, static_cast<net::Handle*>(handle), &wrapper->comm);
    if (!st.ok()) return report("listen", st);
    *listen_comm = wrapper.release();
    return ncclSuccess;
  });
}

ncclResult_t net_connect(void* ctx, int dev, int traffic_class, void* handle, void** send_comm) {
  return guarded("connect", [&] {
    if (!handle || !send_comm) return ncclInvalidArgument;
    *send_comm = nullptr;
    auto* context = static_cast<Context*>(ctx);
    auto state = context ? context->state : current_state();
    if (!state) return ncclInvalidUsage;
    if (traffic_class == abi::NCCL_NET_TRAFFIC_CLASS_UNDEF && context) traffic_class = context->traffic_class;
    std::unique_ptr<net::SendComm> comm;
    net::Status st = state->transport->connect(dev, traffic_class, static_cast<net::Handle*>(handle), &comm);
    if (!st.ok()) return report("connect", st);
    if (comm) *send_comm = wrap(state, std::move(comm), dev);
    return ncclSuccess;
  });
}

ncclResult_t net_accept(void* listen_comm, void** recv_comm) {
  return guarded("accept", [&] {
    if (!listen_comm || !recv_comm) return ncclInvalidArgument;
    *recv_comm = nullptr;
    auto* listener = static_cast<ListenWrapper*>(listen_comm);
    std::unique_ptr<net::RecvComm> comm;
    net::Status st = listener->comm->accept(&comm);
    add(process_stats().connections_rejected, listener->comm->take_rejected());
    if (!st.ok()) return report("accept", st);
    if (comm) *recv_comm = wrap(listener->state, std::move(comm), listener->dev);
    return ncclSuccess;
  });
}

namespace {
// The handle NCCL keeps is the comm's registration itself; deregMr deletes it.
ncclResult_t register_memory(const char* call, void* comm, const net::MemoryDescriptor& memory, void** mhandle) {
  return guarded(call, [&] {
    if (!comm || !mhandle) return ncclInvalidArgument;
    *mhandle = nullptr;
    std::unique_ptr<net::MemoryRegion> region;
    net::Status st = static_cast<CommWrapper*>(comm)->register_memory(memory, &region);
    if (!st.ok()) return report(call, st);
    *mhandle = region.release();
    return ncclSuccess;
  });
}
}  // namespace

ncclResult_t net_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (!comm || !mhandle) return ncclInvalidArgument;
  auto* wrapper = static_cast<CommWrapper*>(comm);
  const bool cuda = type == abi::NCCL_PTR_CUDA && wrapper->state->transport->devices()[wrapper->dev].cuda_pointers;
  if (type != abi::NCCL_PTR_HOST && !cuda) {
    *mhandle = nullptr;
    SIEVE_WARN(
        "regMr: memory type %d is not supported on this device (host memory here; device memory where "
        "getProperties reports NCCL_PTR_CUDA, or through regMrDmaBuf where it reports dma-buf support)",
        type);
    return ncclInternalError;
  }
  net::MemoryDescriptor memory{data, size, -1, 0};
  memory.cuda = cuda;
  return register_memory("regMr", comm, memory, mhandle);
}

ncclResult_t net_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  if (!comm || !mhandle) return ncclInvalidArgument;
  if (type == abi::NCCL_PTR_HOST && fd < 0) return net_reg_mr(comm, data, size, type, mhandle);
  if (fd < 0) {
    *mhandle = nullptr;
    SIEVE_WARN("regMrDmaBuf: memory type %d without a dma-buf fd cannot be registered", type);
    return ncclInternalError;
  }
  return register_memory("regMrDmaBuf", comm, net::MemoryDescriptor{data, size, fd, offset}, mhandle);
}

ncclResult_t net_dereg_mr(void* comm, void* mhandle) {
  return guarded("deregMr", [&] {
    if (!comm) return ncclInvalidArgument;
    delete static_cast<net::MemoryRegion*>(mhandle);
    return ncclSuccess;
  });
}

ncclResult_t net_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  (void)tag;
  (void)mhandle;
  return guarded("isend", [&] {
    if (!send_comm || !request) return ncclInvalidArgument;
    net::Request* r = nullptr;
    auto* wrapper = static_cast<CommWrapper*>(send_comm);
    net::Status st = wrapper->send->isend(data, size, &r);
    *request = r;
    if (r) wrapper->traffic->posted();
    return st.ok() ? ncclSuccess : to_nccl(st.code());  // the comm logged its failure
  });
}

ncclResult_t net_irecv(void* recv_comm, int n, void** data, const size_t* sizes, int* tags, void** mhandles,
                       void** request) {
  (void)tags;
  (void)mhandles;
  return guarded("irecv", [&] {
    if (request) *request = nullptr;
    if (n != 1) {
      SIEVE_WARN("irecv: %d grouped receives requested but maxRecvs is 1", n);
      return ncclInternalError;
    }
    if (!recv_comm || !request || !data || !sizes) return ncclInvalidArgument;
    net::Request* r = nullptr;
    auto* wrapper = static_cast<CommWrapper*>(recv_comm);
    net::Status st = wrapper->recv->irecv(data[0], sizes[0], &r);
    *request = r;
    if (r) wrapper->traffic->posted();
    return st.ok() ? ncclSuccess : to_nccl(st.code());
  });
}

ncclResult_t net_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return guarded("iflush", [&] {
    if (!recv_comm || !request) return ncclInvalidArgument;
    *request = nullptr;
    // One receive per request (maxRecvs 1): its buffer is the one to flush. Host memory and TCP: none.
    if (n < 1 || !data || !sizes || !mhandles || sizes[0] <= 0) return ncclSuccess;
    net::Request* r = nullptr;
    auto* wrapper = static_cast<CommWrapper*>(recv_comm);
    net::Status st =
        wrapper->recv->flush(data[0], static_cast<size_t>(sizes[0]), static_cast<net::MemoryRegion*>(mhandles[0]), &r);
    *request = r;
    return st.ok() ? ncclSuccess : report("iflush", st);
  });
}

ncclResult_t net_test(void* request, int* done, size_t* size) {
  return guarded("test", [&] {
    if (!request || !done) return ncclInvalidArgument;
    *done = 0;
    net::Completion c;
    auto* r = static_cast<net::Request*>(request);
    auto* traffic = static_cast<CommTraffic*>(r->comm_tag());  // read before test frees the slot
    net::Status st = r->test(&c);
    if (!st.ok()) return to_nccl(st.code());  // logged once by the comm, with the peer
    if (c.done) {
      *done = 1;
      if (size) *size = c.size;
      if (c.message) {
        count_completion(c);
        if (traffic) traffic->completed(c);
      }
    }
    return ncclSuccess;
  });
}

ncclResult_t net_close_send(void* send_comm) {
  return guarded("closeSend", [&] {
    if (!send_comm) return ncclSuccess;
    delete static_cast<CommWrapper*>(send_comm);
    comm_closed();
    return ncclSuccess;
  });
}

ncclResult_t net_close_recv(void* recv_comm) {
  return guarded("closeRecv", [&] {
    if (!recv_comm) return ncclSuccess;
    delete static_cast<CommWrapper*>(recv_comm);
    comm_closed();
    return ncclSuccess;
  });
}

ncclResult_t net_close_listen(void* listen_comm) {
  return guarded("closeListen", [&] {
    delete static_cast<ListenWrapper*>(listen_comm);
    return ncclSuccess;
  });
}

ncclResult_t net_set_attr(void* ctx, const void* attr) {
  (void)attr;  // flow hints: the transport sizes itself from SIEVE_NSOCKS / SIEVE_NTHREADS
  return ctx ? ncclSuccess : ncclInvalidArgument;
}

}  // namespace sieve::plugin
