// Connection establishment as non-blocking state machines. NCCL calls connect and accept again and
// again; each call moves every socket of the connection as far as it can without waiting.
//
// Per socket: connector sends hello (listener nonce from the handle, connection id, socket index,
// caps, its nonce); listener answers welcome (its caps, its nonce, a keyed hash proving the job
// token); connector answers proof (its own keyed hash). The token itself never travels.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "net/connection.h"
#include "net/transport.h"
#include "net/wire.h"

namespace sieve::net {

class Connector {
 public:
  // helper_cpus: where the new comm's helper threads run (empty: anywhere).
  // rate_limiter: the device's send budget (null: unlimited).
  Connector(const TransportOptions& options, const wire::HandleFields& handle, std::vector<int> helper_cpus,
            std::shared_ptr<RateLimiter> rate_limiter = nullptr);
  // *comm is set once every socket finished its handshake; an error ends the attempt.
  Status progress(std::unique_ptr<SendComm>* comm);

 private:
  enum class Stage { Connecting, SendHello, ReadWelcome, SendProof, Done };
  struct Socket {
    Fd fd;
    Stage stage = Stage::Connecting;
    PartialMessage message;
    wire::Hello hello{};
    uint32_t caps = 0;
  };
  Status step(Socket& s);

  const TransportOptions options_;
  const std::vector<int> helper_cpus_;
  const std::shared_ptr<RateLimiter> rate_limiter_;
  const wire::HandleFields handle_;
  const std::string peer_;
  const uint64_t connection_id_;
  const Clock::time_point deadline_;
  std::vector<Socket> sockets_;  // [0] control, then data
  bool started_ = false;
};

class TcpListenComm final : public ListenComm {
 public:
  TcpListenComm(const TransportOptions& options, Fd listener, uint64_t nonce, std::string address,
                std::vector<int> helper_cpus);
  Status accept(std::unique_ptr<RecvComm>* comm) override;
  uint64_t take_rejected() override;

 private:
  enum class Stage { ReadHello, SendWelcome, ReadProof };
  struct Pending {
    Fd fd;
    std::string peer;
    Stage stage = Stage::ReadHello;
    PartialMessage message;
    wire::Hello hello{};
    uint64_t server_nonce = 0;
    Clock::time_point deadline;
  };
  struct Group {  // sockets of one incoming connection, by index
    std::vector<Fd> sockets;
    int present = 0;
    wire::Hello first{};
    std::string peer;
    Clock::time_point deadline;
  };
  void accept_new();
  // False when the pending socket is finished (moved to a group or rejected).
  bool step(Pending& p);
  void reject(const std::string& peer, const std::string& reason);
  bool join_group(Pending& p);

  const TransportOptions options_;
  const std::vector<int> helper_cpus_;
  Fd listener_;
  const uint64_t nonce_;
  const std::string address_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::map<uint64_t, Group> groups_;
  uint64_t rejected_ = 0;
};

}  // namespace sieve::net
