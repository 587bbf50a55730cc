// SPDX-License-Identifier: Apache-2.0
// Fuzzes a TCP receive comm's stream (net/tcp/comm.cc, net/tcp/stripe_worker.cc,
// net/tcp/stripe_codec.cc): frame headers on the control socket, stripe headers and codec frames on
// the data sockets, exactly as a peer would send them, over socket pairs. The input picks the connection's shape (data
// sockets, codec negotiated or not, stripe size), two receive sizes, then records of (socket, bytes). The senders then
// close, so every receive must end, done or failed, within a bounded number of tests: nothing a peer sends may hang a
// job. A receive that completes reports no more than it posted.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "net/log.h"
#include "net/tcp/comm.h"

using namespace sieve::net;

namespace {

struct Input {
  const uint8_t* data;
  size_t size;
  uint8_t byte() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sieve::log::set_stderr_level(sieve::log::Level::kNone);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const int nsocks = 1 + in.byte() % 4;
  Connection connection;
  connection.peer = "fuzz";
  connection.caps = (in.byte() & 1) ? wire::kCapZeroElide : 0;
  connection.chunk_size = uint64_t{4096} << (in.byte() % 6);
  std::vector<Fd> senders;
  for (int s = 0; s <= nsocks; ++s) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) return 0;
    (s == 0 ? connection.control : connection.data.emplace_back()) = Fd(pair[0]);
    senders.emplace_back(pair[1]);
  }
  CommOptions options;
  options.progress = TransportOptions::Progress::kInline;
  options.peer_timeout_ms = 60000;
  TcpRecvComm comm(std::move(connection), options);
  if (!comm.start(StripeWorker::Direction::kReceive).ok()) return 0;

  size_t capacity[2];
  for (size_t& c : capacity) c = (size_t{in.byte()} << 8 | in.byte()) * 16;  // up to 1 MiB
  std::vector<std::vector<char>> buffers = {std::vector<char>(capacity[0] + 1), std::vector<char>(capacity[1] + 1)};
  Request* requests[2] = {nullptr, nullptr};
  for (int r = 0; r < 2; ++r)
    if (!comm.irecv(buffers[r].data(), capacity[r], &requests[r]).ok()) return 0;

  while (in.size > 0) {  // records: socket, length, bytes
    const size_t socket = in.byte() % senders.size();
    const size_t n = std::min<size_t>(size_t{in.byte()} << 4 | (in.byte() & 15), in.size);
    ::send(senders[socket].get(), in.data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    in.data += n;
    in.size -= n;
  }
  senders.clear();  // EOF everywhere: what has not arrived never will

  for (int r = 0; r < 2; ++r) {
    if (!requests[r]) continue;
    Completion done;
    Status st;
    int tests = 0;
    for (; tests < 100000; ++tests) {
      st = requests[r]->test(&done);
      if (!st.ok() || done.done) break;
    }
    if (tests == 100000) std::abort();  // neither done nor failed after its peer closed: a hang
    if (!st.ok()) break;                // the comm failed: later requests fail with it
    if (done.size > capacity[r]) std::abort();
  }
  return 0;
}
