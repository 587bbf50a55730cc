// SPDX-License-Identifier: Apache-2.0
// Replays collectives captured elsewhere (tests/tools/python/test_real_torch.py: what real PyTorch
// FSDP issued, and what publish_fsdp published) through the real Proxy on the fake backend, and
// prints what the proxy did with each: so a test of real structures asks the proxy's own code which
// calls compact with which mask, instead of predicting it with a second implementation of the rule.
//
// Usage: proxy_shape_replay INPUT.json  (JSON on stdout; exit 0 once every call was replayed)
// Input:
//   {"options": {"min_count": 1, "max_density": 1.0},  (optional, these by default: whether a mask
//                                                        pays off is no question of the replay's)
//    "comms": [[0, 1], ...],            (each communicator's ranks, in its own rank order)
//    "ranks": [{"commit": [0],          (the communicators this rank commits on, in order)
//               "published": [{"collective": "all_gather", "dtype": "bf16", "count": 80, "bits": HEX}],
//               "calls": [{"collective": "reduce_scatter", "comm": 0, "dtype": "f32", "count": 80,
//                          "nonzero": HEX}]}, ...]}
// HEX: an LSB-first bitmap (sieve's), two hex digits a byte. count is the collective's whole buffer
// (a reduce-scatter's input, an all-gather's output); "nonzero" is where this rank's data of it is
// nonzero, and the replay's data is nonzero exactly there (an all-gather sends its own shard of it;
// a reduce-scatter sums).
// Output: {"ranks": [{"commits": ["activated"], "calls": [{"path": "dense", "mask": -1, "exact": true,
//          "error": ""}]}], "log": [...]}: per call the proxy's Path, the index (into the rank's
// published list) of the mask whose layout gathered the call's data (-1: none, -2: not one it
// published), and whether its result equals the same call's dense result (the fake backend without
// the proxy, on a communicator of its own); "log": the proxy's log lines.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "compress/json.h"
#include "net/log.h"
#include "plugin/proxy/proxy.h"
#include "tests/plugin/proxy/fake_backend.h"
#include "tools/common/json_writer.h"

namespace sieve::plugin::proxy::testing {
namespace {

struct Published {
  Collective collective = Collective::kAllGather;
  DType type = DType::kF32;
  std::shared_ptr<const compress::Mask> mask;
};

struct CallSpec {
  Collective collective = Collective::kAllGather;
  size_t comm = 0;
  DType type = DType::kF32;
  compress::Mask nonzero;
};

struct RankSpec {
  std::vector<size_t> commit;
  std::vector<Published> published;
  std::vector<CallSpec> calls;
};

struct Input {
  PlanRules rules;
  std::vector<std::vector<int>> comms;
  std::vector<RankSpec> ranks;
};

struct CallResult {
  Path path = Path::kPassThrough;
  long mask = -1;
  bool exact = false;
  std::string error;
};

struct RankResult {
  std::vector<std::string> commits;
  std::vector<CallResult> calls;
};

[[noreturn]] void fail(const std::string& why) {
  std::cerr << "proxy_shape_replay: " << why << "\n";
  std::exit(2);
}

const compress::json::Value& member(const compress::json::Value& v, const char* key) {
  const compress::json::Value* found = v.find(key);
  if (!found) fail(std::string("missing \"") + key + "\"");
  return *found;
}

uint64_t number(const compress::json::Value& v) {
  uint64_t n = 0;
  if (!v.as_uint64(&n)) fail("not a non-negative integer: " + v.text);
  return n;
}

DType dtype_of(const std::string& name) {
  for (int t = 0; t < compress::kDTypeCount; ++t)
    if (name == compress::dtype_name(DType(t))) return DType(t);
  fail("unknown dtype " + name);
}

Collective collective_of(const std::string& name) {
  for (Collective c : {Collective::kReduceScatter, Collective::kAllGather})
    if (name == compress::collective_name(c)) return c;
  fail("not a reduce-scatter or all-gather: " + name);
}

compress::Mask mask_of(const std::string& hex, uint64_t count) {
  if (hex.size() != 2 * ((count + 7) / 8)) fail("a bitmap of " + std::to_string(count) + " elements in " + hex);
  std::vector<uint8_t> bytes(hex.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  return compress::Mask::from_bitmap(bytes.data(), count);
}

Input read_input(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) fail("cannot read " + path);
  compress::json::Value doc;
  const std::string s = text.str();
  if (auto st = compress::json::parse(s.data(), s.size(), &doc); !st.ok()) fail(path + ": " + st.message());
  Input in;
  in.rules.min_count = 1;
  in.rules.max_density = 1.0;
  if (const compress::json::Value* o = doc.find("options")) {
    if (const compress::json::Value* v = o->find("min_count")) in.rules.min_count = number(*v);
    if (const compress::json::Value* v = o->find("max_density")) in.rules.max_density = std::stod(v->text);
  }
  for (const auto& comm : member(doc, "comms").items) {
    in.comms.emplace_back();
    for (const auto& r : comm.items) in.comms.back().push_back(int(number(r)));
  }
  for (const auto& r : member(doc, "ranks").items) {
    RankSpec rank;
    for (const auto& c : member(r, "commit").items) rank.commit.push_back(size_t(number(c)));
    for (const auto& p : member(r, "published").items) {
      const uint64_t count = number(member(p, "count"));
      rank.published.push_back(
          Published{collective_of(member(p, "collective").text), dtype_of(member(p, "dtype").text),
                    std::make_shared<const compress::Mask>(mask_of(member(p, "bits").text, count))});
    }
    for (const auto& c : member(r, "calls").items) {
      const uint64_t count = number(member(c, "count"));
      CallSpec call{collective_of(member(c, "collective").text), size_t(number(member(c, "comm"))),
                    dtype_of(member(c, "dtype").text), mask_of(member(c, "nonzero").text, count)};
      if (call.comm >= in.comms.size()) fail("no communicator " + std::to_string(call.comm));
      rank.calls.push_back(std::move(call));
    }
    in.ranks.push_back(std::move(rank));
  }
  return in;
}

// Records which published mask's layout gathered a call's data (the proxy builds its layouts from the
// registry's own Mask objects, which this driver created and numbered).
class ObservingBackend : public FakeBackend {
 public:
  using FakeBackend::FakeBackend;
  int create_layout(const compress::Mask& mask, uint64_t first, uint64_t count,
                    std::unique_ptr<DeviceLayout>* out) override {
    const int rc = FakeBackend::create_layout(mask, first, count, out);
    if (rc == kResultSuccess) owners_[out->get()] = &mask;
    return rc;
  }
  int gather(const DeviceLayout& layout, size_t element_size, const void* src, void* compact, Stream stream) override {
    if (auto it = owners_.find(&layout); it != owners_.end()) gathered = it->second;
    return FakeBackend::gather(layout, element_size, src, compact, stream);
  }
  const compress::Mask* gathered = nullptr;

 private:
  std::map<const DeviceLayout*, const compress::Mask*> owners_;  // one rank's thread uses it
};

Comm comm_handle(size_t c) { return reinterpret_cast<Comm>(0x1000 + 0x10 * c); }
Comm reference_handle(size_t c) { return reinterpret_cast<Comm>(0x80000 + 0x10 * c); }
Stream const kStream = reinterpret_cast<Stream>(0x2000);

// A nonzero element of `type` at `i` of rank `rank`'s data; zero where the data is zero.
void write_element(DType type, void* at, bool nonzero, int rank, uint64_t i) {
  const double v = nonzero ? 1.0 + double(rank % 3) + 0.5 * double(i % 7) : 0.0;
  const float f = float(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  switch (type) {
    case DType::kF32: std::memcpy(at, &f, 4); break;
    case DType::kF64: std::memcpy(at, &v, 8); break;
    case DType::kBF16: *static_cast<uint16_t*>(at) = uint16_t(bits >> 16); break;  // v has 8 significant bits
    case DType::kF16: *static_cast<uint16_t*>(at) = nonzero ? uint16_t(0x3c00 + (i % 7) * 0x80) : 0; break;
    case DType::kI8:
    case DType::kU8: *static_cast<uint8_t*>(at) = uint8_t(v); break;
    case DType::kI32: *static_cast<int32_t*>(at) = int32_t(v); break;
    case DType::kI64: *static_cast<int64_t*>(at) = int64_t(v); break;
  }
}

bool same(DType type, const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  if (!compactable(type)) return a == b;
  const size_t es = compress::dtype_size(type);
  for (size_t i = 0; i < a.size(); i += es)
    if (element_value(type, &a[i]) != element_value(type, &b[i])) return false;  // -0.0 == 0.0
  return true;
}

struct Worlds {
  std::vector<std::unique_ptr<FakeWorld>> proxied, reference;
  void abort(const std::string& why) {
    for (auto& w : proxied) w->abort(why);
    for (auto& w : reference) w->abort(why);
  }
};

// One call of one rank: through the proxy, then the same call dense on the reference communicator.
CallResult replay_call(ObservingBackend& backend, Proxy& proxy, const std::vector<int>& members, int rank,
                       const CallSpec& call) {
  CallResult result;
  const int n = int(members.size());
  const int local = int(std::find(members.begin(), members.end(), rank) - members.begin());
  const uint64_t count = call.nonzero.count(), per_rank = count / uint64_t(n);
  if (local == n || count % uint64_t(n) != 0) {
    result.error = "rank not in the communicator, or a count its ranks do not divide";
    return result;
  }
  const size_t es = compress::dtype_size(call.type);
  const bool gather = call.collective == Collective::kAllGather;
  const uint64_t in_count = gather ? per_rank : count, out_count = gather ? count : per_rank;
  const uint64_t first = gather ? uint64_t(local) * per_rank : 0;
  std::vector<unsigned char> in(in_count * es), out(out_count * es, 0xAB), dense(out_count * es, 0xAB);
  for (uint64_t i = 0; i < in_count; ++i)
    write_element(call.type, &in[i * es], call.nonzero.test(first + i), gather ? 0 : rank, first + i);
  backend.gathered = nullptr;
  const Comm comm = comm_handle(call.comm), reference = reference_handle(call.comm);
  int rc = gather ? proxy.all_gather(in.data(), out.data(), per_rank, call.type, comm, kStream, &result.path)
                  : proxy.reduce_scatter(in.data(), out.data(), per_rank, call.type, ReduceOp::kSum, comm, kStream,
                                         &result.path);
  if (rc == kResultSuccess)
    rc = gather
             ? backend.all_gather(in.data(), dense.data(), per_rank, call.type, reference, kStream)
             : backend.reduce_scatter(in.data(), dense.data(), per_rank, call.type, ReduceOp::kSum, reference, kStream);
  if (rc != kResultSuccess) {
    result.error = "failed (" + std::to_string(rc) + "): " + backend.error;
    return result;
  }
  result.exact = same(call.type, out, dense);
  return result;
}

struct Replayer {
  Replayer(const Input& in, Worlds& worlds, int rank) {
    ProxyOptions options;
    options.rules = in.rules;
    bool first = true;
    for (size_t c = 0; c < in.comms.size(); ++c) {
      const auto& m = in.comms[c];
      const auto it = std::find(m.begin(), m.end(), rank);
      if (it == m.end()) continue;
      const int local = int(it - m.begin());
      if (first) backend = std::make_unique<ObservingBackend>(*worlds.proxied[c], local, comm_handle(c));
      else backend->join(comm_handle(c), *worlds.proxied[c], local);
      backend->join(reference_handle(c), *worlds.reference[c], local);
      first = false;
    }
    if (!backend) fail("rank " + std::to_string(rank) + " is in no communicator");
    proxy = std::make_unique<Proxy>(*backend, registry, options, stats);
  }
  compress::MaskRegistry registry;
  ProcessStats stats;
  std::unique_ptr<ObservingBackend> backend;
  std::unique_ptr<Proxy> proxy;
};

RankResult replay_rank(const Input& in, Worlds& worlds, Replayer& me, int rank) {
  const RankSpec& spec = in.ranks[size_t(rank)];
  RankResult result;
  std::map<const compress::Mask*, long> index;
  for (size_t i = 0; i < spec.published.size(); ++i) {
    const Published& p = spec.published[i];
    index[p.mask.get()] = long(i);
    if (auto st = me.registry.publish_collective(p.collective, p.type, p.mask, nullptr); !st.ok())
      fail("rank " + std::to_string(rank) + " could not publish mask " + std::to_string(i) + ": " + st.message());
  }
  for (size_t c : spec.commit) {
    CommitOutcome outcome;
    const int rc = me.proxy->commit(comm_handle(c), kStream, 0, &outcome);
    const char* names[] = {"refused", "activated", "pending"};
    result.commits.push_back(rc ? "failed: " + me.backend->error
                                : names[int(outcome.state)] + std::string(outcome.reason.empty() ? "" : ": ") +
                                      outcome.reason);
  }
  for (const CallSpec& call : spec.calls) {
    CallResult r = replay_call(*me.backend, *me.proxy, in.comms[call.comm], rank, call);
    if (me.backend->gathered) r.mask = index.count(me.backend->gathered) ? index[me.backend->gathered] : -2;
    result.calls.push_back(r);
    if (!r.error.empty()) {  // the other ranks' next call fails at once instead of waiting for this one
      worlds.abort("rank " + std::to_string(rank) + ": " + r.error);
      break;
    }
  }
  return result;
}

std::mutex log_mutex;
std::vector<std::string> log_lines;

void keep_log(log::Level, log::Subsystem, const char*, int, const char* message) {
  std::lock_guard lock(log_mutex);
  log_lines.push_back(message);
}

void write(const std::vector<RankResult>& results) {
  tools::JsonWriter json(std::cout);
  json.begin_object();
  json.key("ranks");
  json.begin_array();
  for (const RankResult& r : results) {
    json.begin_object();
    json.member_strings("commits", r.commits);
    json.key("calls");
    json.begin_array();
    for (const CallResult& c : r.calls) {
      json.begin_object();
      json.member("path", path_name(c.path));
      json.member("mask", int64_t(c.mask));
      json.member("exact", c.exact);
      json.member("error", c.error);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
  json.member_strings("log", log_lines);
  json.end_object();
  std::cout << "\n";
}

int run(const std::string& path) {
  const Input in = read_input(path);
  Worlds worlds;
  for (const auto& m : in.comms) {
    worlds.proxied.push_back(std::make_unique<FakeWorld>(int(m.size())));
    worlds.reference.push_back(std::make_unique<FakeWorld>(int(m.size())));
  }
  log::set_sink(&keep_log);
  std::vector<std::unique_ptr<Replayer>> replayers;
  for (size_t r = 0; r < in.ranks.size(); ++r) replayers.push_back(std::make_unique<Replayer>(in, worlds, int(r)));
  std::vector<RankResult> results(in.ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < in.ranks.size(); ++r)
    threads.emplace_back([&, r] { results[r] = replay_rank(in, worlds, *replayers[r], int(r)); });
  for (auto& t : threads) t.join();
  log::set_sink(nullptr);
  write(results);
  return 0;
}

}  // namespace
}  // namespace sieve::plugin::proxy::testing

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: proxy_shape_replay INPUT.json\n";
    return 2;
  }
  return sieve::plugin::proxy::testing::run(argv[1]);
}
