// SPDX-License-Identifier: Apache-2.0
#include "net/handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

#include "net/job_token.h"
#include "net/log.h"

namespace sieve::net {

static_assert(sizeof(PartialMessage::data) >= wire::kHelloBytes &&
                  sizeof(PartialMessage::data) >= wire::kWelcomeBytes &&
                  sizeof(PartialMessage::data) >= wire::kProofBytes,
              "a handshake message does not fit a PartialMessage");

namespace {

// Bounds on what reaching the port can make a listener hold (see HandshakeListener).
constexpr size_t kMaxUnproven = 128;          // sockets whose hello has not proved the token
constexpr size_t kMaxUnprovenPerSource = 32;  // ... of them from one address
constexpr size_t kMaxProven = 64;             // sockets that showed it, still handshaking
constexpr size_t kMaxAcceptPerCall = 64;      // a flood waits in the backlog, pending sockets get read
constexpr size_t kMaxGroups = 8;              // authenticated connections still missing sockets
// Warnings about dropped sockets: this many per window, then one line with the count of the rest.
constexpr int kWarnPerWindow = 8;
constexpr auto kWarnWindow = std::chrono::seconds(10);
// The listener answers only when NCCL calls accept on its side, which a slow rank may do late:
// a connect waits at least this long for the welcome (a dead listener is refused or reset sooner).
constexpr int kMinConnectWaitMs = 30000;
// How often one socket of a connect may be dropped by the listener before its welcome, and connect again.
constexpr int kMaxSocketRetries = 16;

// The codec works on data sockets, which a verbs connection does not have: RDMA writes land in the
// receiver's buffer directly, with nothing in between to expand elided words.
uint32_t caps_offered(const TransportOptions& o, Carrier carrier) {
  if (carrier == Carrier::kVerbs) return wire::kCapVerbs;
  return o.offer_codec && o.codec != TransportOptions::Codec::kOff ? wire::kCapZeroElide : 0u;
}

const char* carrier_name(uint32_t caps) { return (caps & wire::kCapVerbs) ? "ib (verbs)" : "tcp"; }

bool writable_now(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1;
}

Status handshake_error(const std::string& peer, const Status& cause) {
  return error(Code::kRemoteError, "handshake with " + peer + " failed: " + cause.message());
}

}  // namespace

// ---------------------------------------------------------------- connector

Connector::Connector(const TransportOptions& options, const wire::HandleFields& handle, Carrier carrier)
    : options_(options),
      carrier_(carrier),
      handle_(handle),
      peer_(handle.address.text()),
      connection_id_(random64()),
      deadline_(Clock::now() + std::chrono::milliseconds(std::max(options.peer_timeout_ms, kMinConnectWaitMs))) {}

Status Connector::progress(Connection* out, bool* done) {
  *done = false;
  if (!started_) {
    started_ = true;
    if (TokenlessWarning::process().should_warn(options_.job_token, handle_.address))
      SIEVE_WARN(
          "connecting to %s, another host, without SIEVE_JOB_TOKEN: any process that sees NCCL's handle "
          "(it crosses NCCL's bootstrap in clear) can join this job's connections; set one SIEVE_JOB_TOKEN of "
          "at least %zu random bytes on every node, e.g. from `openssl rand -hex 16` (warned once per process)",
          peer_.c_str(), kMinJobTokenBytes);
    const int nsocks = carrier_ == Carrier::kVerbs ? 0 : options_.nsocks;
    sockets_.resize(nsocks + 1);
    for (size_t i = 0; i < sockets_.size(); ++i) {
      Status st = start_connect(handle_.address, &sockets_[i].fd);
      if (!st.ok()) return st;
      wire::Hello& h = sockets_[i].hello;
      h.socket_index = static_cast<uint16_t>(i);
      h.nsocks = static_cast<uint16_t>(nsocks);
      h.caps = caps_offered(options_, carrier_);
      h.listener_nonce = handle_.listener_nonce;
      h.connection_id = connection_id_;
      h.client_nonce = random64();
      h.chunk_size = options_.chunk_size;
      h.mac = wire::hello_mac(options_.job_token, h);
    }
  }
  bool all_done = true;
  for (auto& s : sockets_) {
    Status st = step(s);
    if (!st.ok()) return st;
    all_done = all_done && s.stage == Stage::kDone;
  }
  if (!all_done) {
    if (Clock::now() > deadline_)
      return error(Code::kRemoteError, "connecting to " + peer_ + ": no complete handshake within " +
                                           std::to_string(std::max(options_.peer_timeout_ms, kMinConnectWaitMs)) +
                                           " ms");
    return ok_status();
  }
  Connection& c = *out;
  c.peer = peer_;
  c.chunk_size = options_.chunk_size;
  c.caps = sockets_[0].caps;
  c.control = std::move(sockets_[0].fd);
  c.data.clear();
  for (size_t i = 1; i < sockets_.size(); ++i) c.data.push_back(std::move(sockets_[i].fd));
  tune_connection(c.control.get(), options_.peer_timeout_ms);
  for (auto& fd : c.data) tune_connection(fd.get(), options_.peer_timeout_ms);
  *done = true;
  return ok_status();
}

// A listener under a flood may drop a socket whose hello it has not read yet (it cannot tell it from
// the flood's); the socket connects again, a bounded number of times, until the connect's deadline.
// One the listener welcomed is never retried: what it refused then (token, transport) stays refused.
Status Connector::dropped_before_welcome(Socket& s, const Status& cause) {
  if (s.retries >= kMaxSocketRetries || Clock::now() > deadline_) return handshake_error(peer_, cause);
  ++s.retries;
  Fd fresh;
  Status st = start_connect(handle_.address, &fresh);
  if (!st.ok()) return handshake_error(peer_, cause);
  s.fd = std::move(fresh);
  s.hello.client_nonce = random64();
  s.hello.mac = wire::hello_mac(options_.job_token, s.hello);
  s.stage = Stage::kConnecting;
  s.message = PartialMessage{};
  return ok_status();
}

Status Connector::step(Socket& s) {
  const int fd = s.fd.get();
  if (s.stage == Stage::kConnecting) {
    if (!writable_now(fd)) return ok_status();
    int err = connect_error(fd);
    if (err) return error(Code::kRemoteError, "connecting to " + peer_ + ": " + errno_text(err));
    s.stage = Stage::kSendHello;
    s.message = PartialMessage{};
    s.message.size = wire::kHelloBytes;
    wire::encode_hello(s.hello, s.message.data);
  }
  if (s.stage == Stage::kSendHello) {
    Status st = write_message(fd, &s.message, peer_);
    if (!st.ok()) return dropped_before_welcome(s, st);
    if (!s.message.complete()) return ok_status();
    s.stage = Stage::kReadWelcome;
    s.message = PartialMessage{};
    s.message.size = wire::kWelcomeBytes;
  }
  if (s.stage == Stage::kReadWelcome) {
    Status st = read_message(fd, &s.message, peer_);
    if (!st.ok()) return s.message.done == 0 ? dropped_before_welcome(s, st) : handshake_error(peer_, st);
    if (!s.message.complete()) return ok_status();
    wire::Welcome w;
    st = wire::decode_welcome(s.message.data, &w);
    if (!st.ok()) return handshake_error(peer_, st);
    if (w.refusal == wire::Refusal::kHelloMac)
      return error(Code::kRemoteError, "listener " + peer_ +
                                           " refused this side's hello: it did not prove the job token "
                                           "(SIEVE_JOB_TOKEN differs or is set on one side only)");
    Digest expected = wire::handshake_mac(options_.job_token, wire::Role::kListener, s.hello, w.server_nonce);
    if (!digest_equal(expected.data(), w.mac.data(), expected.size()))
      return error(
          Code::kRemoteError,
          "listener " + peer_ + " did not prove the job token (SIEVE_JOB_TOKEN differs or is set on one side only)");
    if ((w.caps & wire::kCapVerbs) != (s.hello.caps & wire::kCapVerbs))
      return error(Code::kInvalidUsage, "listener " + peer_ + " uses the " + carrier_name(w.caps) +
                                            " transport, this side " + carrier_name(s.hello.caps) +
                                            ": set SIEVE_TRANSPORT alike on every node");
    s.caps = w.caps & s.hello.caps;
    wire::Proof proof{wire::handshake_mac(options_.job_token, wire::Role::kConnector, s.hello, w.server_nonce)};
    s.stage = Stage::kSendProof;
    s.message = PartialMessage{};
    s.message.size = wire::kProofBytes;
    wire::encode_proof(proof, s.message.data);
  }
  if (s.stage == Stage::kSendProof) {
    Status st = write_message(fd, &s.message, peer_);
    if (!st.ok()) return handshake_error(peer_, st);
    if (s.message.complete()) s.stage = Stage::kDone;
  }
  return ok_status();
}

// ---------------------------------------------------------------- listener

HandshakeListener::HandshakeListener(const TransportOptions& options, Fd listener, uint64_t nonce, std::string address,
                                     Carrier carrier)
    : options_(options),
      carrier_(carrier),
      listener_(std::move(listener)),
      nonce_(nonce),
      address_(std::move(address)) {}

uint64_t HandshakeListener::take_rejected() {
  uint64_t n = rejected_;
  rejected_ = 0;
  return n;
}

void HandshakeListener::reject(const std::string& peer, const std::string& reason) {
  ++rejected_;
  warn(" dropped a connection from " + peer + ": " + reason);
}

void HandshakeListener::warn(const std::string& what) {
  const Clock::time_point now = Clock::now();
  if (now - warn_window_ >= kWarnWindow) {
    if (unwarned_ > 0)
      SIEVE_WARN("listener %s: %llu more warnings in the last %lld s not shown (rate-limited)", address_.c_str(),
                 static_cast<unsigned long long>(unwarned_),
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(now - warn_window_).count()));
    warn_window_ = now;
    warned_in_window_ = 0;
    unwarned_ = 0;
  }
  if (warned_in_window_ < kWarnPerWindow) {
    ++warned_in_window_;
    SIEVE_WARN("listener %s%s", address_.c_str(), what.c_str());
  } else {
    ++unwarned_;
  }
}

namespace {

// "10.0.0.1:1234" -> "10.0.0.1", "[fe80::1%eth0]:1234" -> "[fe80::1%eth0]".
std::string source_of(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos || peer.back() == ']' ? peer : peer.substr(0, colon);
}

}  // namespace

void HandshakeListener::accept_new() {
  for (size_t accepted = 0; accepted < kMaxAcceptPerCall; ++accepted) {
    Fd fd;
    SocketAddress peer;
    bool got = false;
    Status st = accept_one(listener_.get(), &fd, &peer, &got);
    if (!st.ok()) {
      warn(": " + st.message());  // out of descriptors, say: once per call would flood the log
      return;
    }
    if (!got) return;
    auto p = std::make_unique<Pending>();
    p->fd = std::move(fd);
    p->peer = peer.text();
    p->source = source_of(p->peer);
    p->message.size = wire::kHelloBytes;
    p->deadline = Clock::now() + std::chrono::milliseconds(options_.peer_timeout_ms);
    // Read at once: a real connector sends its hello as soon as it is connected, so it shows the
    // nonce here, before any later socket of a flood could take its place.
    if (!step(*p)) continue;
    if (make_room(*p)) pending_.push_back(std::move(p));
  }
}

bool HandshakeListener::make_room(const Pending& fresh) {
  const bool fresh_proven = fresh.stage != Stage::kReadHello;
  size_t proven = 0, unproven = 0;
  std::map<std::string, size_t> by_source;
  for (const auto& p : pending_) {
    if (p->stage != Stage::kReadHello) {
      ++proven;
    } else {
      ++unproven;
      ++by_source[p->source];
    }
  }
  // Which socket that has shown nothing goes: the oldest of the newcomer's own source when that is
  // at its share, else, when all places are taken, the oldest of all. Not the oldest of the source
  // holding most: a real connector opens all its sockets from one address at once, so against a
  // flood from many addresses it would be that source, and lose its sockets before their hellos
  // arrive over a link with delay. Oldest first gives every socket as long as the flood takes to
  // bring kMaxUnproven more.
  std::string victim_source;
  bool any_source = false;
  if (fresh_proven) {
    if (proven >= kMaxProven) {  // proved the token, never finished: the oldest such goes
      for (size_t i = 0; i < pending_.size(); ++i)
        if (pending_[i]->stage != Stage::kReadHello) {
          reject(pending_[i]->peer, "too many connections in the handshake; dropping the oldest");
          pending_.erase(pending_.begin() + i);
          break;
        }
    }
    return true;
  }
  if (by_source[fresh.source] >= kMaxUnprovenPerSource) {
    victim_source = fresh.source;
  } else if (unproven >= kMaxUnproven) {
    any_source = true;
  } else {
    return true;
  }
  for (size_t i = 0; i < pending_.size(); ++i) {  // in arrival order
    if (pending_[i]->stage == Stage::kReadHello && (any_source || pending_[i]->source == victim_source)) {
      reject(pending_[i]->peer, "too many connections that sent nothing valid; dropping the oldest");
      pending_.erase(pending_.begin() + i);
      return true;
    }
  }
  reject(fresh.peer, "too many connections that sent nothing valid");
  return false;
}

bool HandshakeListener::step(Pending& p) {
  const int fd = p.fd.get();
  if (p.stage == Stage::kReadHello) {
    Status st = read_message(fd, &p.message, p.peer);
    if (!st.ok()) {
      reject(p.peer, st.message());
      return false;
    }
    if (!p.message.complete()) {
      st = wire::check_hello_start(p.message.data, p.message.done);
      if (!st.ok()) reject(p.peer, st.message());
      return st.ok();
    }
    st = wire::decode_hello(p.message.data, &p.hello);
    if (!st.ok()) {
      reject(p.peer, st.message());
      return false;
    }
    if (p.hello.listener_nonce != nonce_) {
      reject(p.peer, "wrong listener nonce (a stale or stray peer)");
      return false;
    }
    // Before a welcome or a place: the nonce is in NCCL's handle, which crosses the bootstrap in
    // clear, so showing it proves little; a hello whose hash needs the token is what earns a place.
    const Digest expected = wire::hello_mac(options_.job_token, p.hello);
    if (!digest_equal(expected.data(), p.hello.mac.data(), expected.size())) {
      refuse_hello(p);
      reject(p.peer, "its hello did not prove the job token (SIEVE_JOB_TOKEN differs or is set on one side only)");
      return false;
    }
    const uint32_t offered = caps_offered(options_, carrier_);
    if ((p.hello.caps & wire::kCapVerbs) != (offered & wire::kCapVerbs))
      p.refusal = std::string("it uses the ") + carrier_name(p.hello.caps) + " transport, this listener " +
                  carrier_name(offered) + " (set SIEVE_TRANSPORT alike on every node)";
    p.server_nonce = random64();
    wire::Welcome w{offered, p.server_nonce,
                    wire::handshake_mac(options_.job_token, wire::Role::kListener, p.hello, p.server_nonce)};
    p.stage = Stage::kSendWelcome;
    p.message = PartialMessage{};
    p.message.size = wire::kWelcomeBytes;
    wire::encode_welcome(w, p.message.data);
  }
  if (p.stage == Stage::kSendWelcome) {
    Status st = write_message(fd, &p.message, p.peer);
    if (!st.ok()) {
      reject(p.peer, st.message());
      return false;
    }
    if (!p.message.complete()) return true;
    if (!p.refusal.empty()) {
      reject(p.peer, p.refusal);
      return false;
    }
    p.stage = Stage::kReadProof;
    p.message = PartialMessage{};
    p.message.size = wire::kProofBytes;
  }
  if (p.stage == Stage::kReadProof) {
    Status st = read_message(fd, &p.message, p.peer);
    if (!st.ok()) {
      reject(p.peer, st.message());
      return false;
    }
    if (!p.message.complete()) return true;
    wire::Proof proof;
    st = wire::decode_proof(p.message.data, &proof);
    if (!st.ok()) {
      reject(p.peer, st.message());
      return false;
    }
    Digest expected = wire::handshake_mac(options_.job_token, wire::Role::kConnector, p.hello, p.server_nonce);
    if (!digest_equal(expected.data(), proof.mac.data(), expected.size())) {
      reject(p.peer, "it did not prove the job token (SIEVE_JOB_TOKEN differs or is set on one side only)");
      return false;
    }
    return join_group(p);
  }
  return true;
}

// One write that fits any empty socket buffer, never waited for: the peer learns why, and the
// socket holds nothing here.
void HandshakeListener::refuse_hello(const Pending& p) {
  wire::Welcome w{caps_offered(options_, carrier_), 0, Digest{}, wire::Refusal::kHelloMac};
  uint8_t bytes[wire::kWelcomeBytes];
  wire::encode_welcome(w, bytes);
  (void)::send(p.fd.get(), bytes, sizeof bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void HandshakeListener::drop_group(std::map<uint64_t, Group>::iterator it, const std::string& reason) {
  reject(it->second.peer, reason);
  groups_.erase(it);  // closes the sockets it holds
}

bool HandshakeListener::join_group(Pending& p) {
  auto it = groups_.find(p.hello.connection_id);
  if (it == groups_.end()) {
    if (groups_.size() >= kMaxGroups) {
      auto oldest = groups_.begin();
      for (auto g = groups_.begin(); g != groups_.end(); ++g)
        if (g->second.deadline < oldest->second.deadline) oldest = g;
      drop_group(oldest, "too many connections waiting for their other sockets; dropping the oldest (" +
                             std::to_string(oldest->second.present) + " of " +
                             std::to_string(oldest->second.sockets.size()) + " sockets there)");
    }
    it = groups_.try_emplace(p.hello.connection_id).first;
    Group& g = it->second;
    g.sockets.resize(p.hello.nsocks + 1);
    g.first = p.hello;
    g.peer = p.peer;
    g.deadline = Clock::now() + std::chrono::milliseconds(options_.peer_timeout_ms);
  }
  Group& g = it->second;
  if (p.hello.nsocks != g.first.nsocks || p.hello.chunk_size != g.first.chunk_size || p.hello.caps != g.first.caps ||
      g.sockets[p.hello.socket_index].valid()) {
    // One socket that does not fit and the whole connection goes: its other sockets would only
    // hold descriptors until the deadline.
    reject(p.peer, "socket " + std::to_string(p.hello.socket_index) + " does not fit its connection");
    drop_group(it, "its connection had a socket that did not fit");
    return false;
  }
  g.sockets[p.hello.socket_index] = std::move(p.fd);
  ++g.present;
  return false;
}

void HandshakeListener::accept(Connection* out, bool* got) {
  *got = false;
  accept_new();
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < pending_.size();) {
    bool keep = step(*pending_[i]);
    if (keep && now > pending_[i]->deadline) {
      reject(pending_[i]->peer, "no complete handshake within " + std::to_string(options_.peer_timeout_ms) + " ms");
      keep = false;
    }
    if (keep) ++i;
    else pending_.erase(pending_.begin() + i);
  }
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group& g = it->second;
    if (g.present == static_cast<int>(g.sockets.size())) {
      Connection& c = *out;
      c.peer = g.peer;
      c.chunk_size = g.first.chunk_size;
      c.caps = g.first.caps & caps_offered(options_, carrier_);
      c.control = std::move(g.sockets[0]);
      c.data.clear();
      for (size_t k = 1; k < g.sockets.size(); ++k) c.data.push_back(std::move(g.sockets[k]));
      groups_.erase(it);
      tune_connection(c.control.get(), options_.peer_timeout_ms);
      for (auto& fd : c.data) tune_connection(fd.get(), options_.peer_timeout_ms);
      *got = true;
      return;
    }
    if (now > g.deadline) {
      reject(g.peer, "only " + std::to_string(g.present) + " of " + std::to_string(g.sockets.size()) +
                         " sockets of its connection arrived in time");
      it = groups_.erase(it);
      continue;
    }
    ++it;
  }
}

}  // namespace sieve::net
