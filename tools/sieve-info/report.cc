// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-info/report.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "net/devices.h"
#if SIEVE_HAVE_VERBS  // a TCP-only build (CMake's SIEVE_VERBS) has no net/ib/
#include "net/ib/ib_gid.h"
#endif
#include "net/log.h"
#include "plugin/sieve.h"
#include "plugin/telemetry.h"
#include "tools/common/install_layout.h"

namespace sieve::info {

namespace {

// The installed library, or the build tree's; else the dynamic loader's search (LD_LIBRARY_PATH,
// ldconfig's cache), as NCCL finds it by name.
std::string find_plugin() {
  const std::string path = tools::InstallLayout::current().plugin();
  return access(path.c_str(), R_OK) == 0 ? path : "libnccl-net-sieve.so";
}

// What the library holds (sieve_capabilities()), read from the copy NetPlugin::open mapped: a build
// without CUDA exports no ncclAllReduce, so under LD_PRELOAD it compacts nothing, and only this says so.
void read_capabilities(PluginReport* report) {
  void* handle = dlopen(report->library_file.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return;
  using Capabilities = uint32_t (*)();
  if (auto call = reinterpret_cast<Capabilities>(dlsym(handle, "sieve_capabilities"))) {
    report->capabilities = call();
    report->capabilities_known = true;
  }
  dlclose(handle);
}

PluginReport inspect_plugin(const std::string& path) {
  PluginReport report;
  report.library = path.empty() ? find_plugin() : path;
  report.abi_versions = tools::exported_versions(report.library, &report.error);
  if (!report.error.empty()) return report;
  if (report.abi_versions.empty()) {
    report.error = "exports no ncclNetPlugin_v" + std::to_string(tools::kOldestVersion) + "..v" +
                   std::to_string(tools::kNewestVersion) + " symbol";
    return report;
  }
  // The plugin's warnings are not printed: what it would warn about ends up in the report (its
  // failures below, its configuration problems from the registry), and sieve-info says it once.
  // SIEVE_LOG_LEVEL=info or trace adds the plugin's own lines below warnings on stderr.
  tools::LoaderOptions options;
  const int asked = tools::environment_log_level();
  options.log_level = asked > tools::kLogWarn ? asked : tools::kLogNone;
  std::string error;
  auto plugin = tools::NetPlugin::open(report.library, options, &error);
  if (!plugin) {
    report.devices_error = error;
    return report;
  }
  report.library_file = plugin->library_file();
  report.used_version = plugin->version();
  report.name = plugin->name() != nullptr ? plugin->name() : "";
  read_capabilities(&report);
  // A failed call's reason is the warning the plugin logged with it; the NCCL code alone says little.
  const auto failure = [](const std::string& call, int result, uint64_t warnings_before) {
    const std::string code = call + " returned " + tools::result_name(result);
    if (tools::plugin_warning_count() == warnings_before) return code;
    std::string reason = tools::last_plugin_warning();
    const std::string prefix = std::string(log::kPrefix) + " ";
    if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());
    return reason + " (" + code + ")";
  };
  uint64_t warnings = tools::plugin_warning_count();
  int result = plugin->init();
  if (result != tools::kNetSuccess) {
    report.devices_error = failure("init", result, warnings);
    return report;
  }
  int count = 0;
  warnings = tools::plugin_warning_count();
  result = plugin->devices(&count);
  if (result != tools::kNetSuccess) {
    report.devices_error = failure("devices", result, warnings);
    return report;
  }
  for (int dev = 0; dev < count; ++dev) {
    tools::NetDeviceInfo device;
    warnings = tools::plugin_warning_count();
    result = plugin->properties(dev, &device);
    if (result != tools::kNetSuccess) {
      report.devices_error = failure("getProperties(" + std::to_string(dev) + ")", result, warnings);
      break;
    }
    report.devices.push_back(device);
  }
  return report;
}

RdmaReport inspect_rdma(const topology::Machine& machine, const config::Settings& settings,
                        const net::TransportOptions& options, std::vector<std::string>* problems) {
  RdmaReport report;
#if !SIEVE_HAVE_VERBS
  (void)machine;
  (void)options;
  report.error = net::kVerbsNotBuilt;
  if (settings.transport == config::TransportChoice::kIb)
    problems->push_back("SIEVE_TRANSPORT=ib, but " + report.error);
  return report;
#else
  const net::ib::VerbsLibrary* verbs = nullptr;
  net::Status st = net::ib::load_verbs(&verbs);
  if (!st.ok()) {
    report.error = st.message();
    if (settings.transport == config::TransportChoice::kIb)
      problems->push_back("SIEVE_TRANSPORT=ib, but " + report.error);
    return report;
  }
  report.library = verbs->path;
  st = net::ib::discover_ports(*verbs, machine, &report.ports, &report.notes);
  if (!st.ok()) report.error = st.message();
  net::ib::HcaSpec spec;
  st = net::ib::parse_hca_spec(options.ib_hca, &spec);
  if (!st.ok()) problems->push_back("configuration: " + st.message());
  const std::vector<net::ib::IbPort> chosen = net::ib::select_ports(report.ports, spec);
  net::ib::GidPolicy policy;
  policy.index = options.ib_gid_index;
  policy.family = options.ib_addr_family;
  st =
      net::ib::parse_address_range(options.ib_addr_range, "SIEVE_IB_ADDR_RANGE (or NCCL_IB_ADDR_RANGE)", &policy.range);
  if (!st.ok()) problems->push_back("configuration: " + st.message());
  for (const net::ib::IbPort& port : report.ports) {
    bool selected = false;
    for (const net::ib::IbPort& c : chosen) selected = selected || c.name() == port.name();
    report.selected.push_back(selected);
    int gid = -1;
    st = net::ib::select_gid(port, policy, &gid);
    if (!st.ok() && selected) problems->push_back(st.message());
    report.gid_index.push_back(st.ok() ? gid : -1);
  }
  const bool ib_asked = settings.transport == config::TransportChoice::kIb;
  if (ib_asked && chosen.empty() && !report.error.empty())
    problems->push_back("SIEVE_TRANSPORT=ib, but " + report.error);
  else if (ib_asked && chosen.empty())
    problems->push_back("SIEVE_TRANSPORT=ib, but no active RDMA port is selected (" +
                        std::to_string(report.ports.size()) + " port(s) found" +
                        (options.ib_hca.empty() ? "" : ", SIEVE_IB_HCA or NCCL_IB_HCA=" + options.ib_hca) + ")");
  return report;
#endif
}

// The plugin's rule (net::Transport::choose) from what inspect_rdma found: verbs are usable when
// libibverbs loads and a selected port is active.
void choose_transport(const config::Settings& settings, Report* report) {
  const RdmaReport& rdma = report->rdma;
  size_t selected = 0;
  for (bool s : rdma.selected) selected += s ? 1 : 0;
  const bool usable = !rdma.library.empty() && selected > 0;
  const std::string problem = rdma.library.empty() || !rdma.error.empty() ? rdma.error : "no active RDMA port selected";
  const net::Transport::Asked asked = settings.transport == config::TransportChoice::kIb ? net::Transport::Asked::kIb
                                      : settings.transport == config::TransportChoice::kTcp
                                          ? net::Transport::Asked::kTcp
                                          : net::Transport::Asked::kAuto;
  const net::Transport::Choice choice = net::Transport::choose(asked, usable, selected, problem);
  report->transport = choice.verbs ? "ib" : "tcp";
  report->transport_why = choice.why;
}

// --require's verdict: one line per capability asked for that the library does not have.
void require_capabilities(const PluginReport& plugin, const std::vector<std::string>& required,
                          std::vector<std::string>* problems) {
  if (required.empty() || !plugin.error.empty()) return;
  for (const auto& name : required) {
    const auto& all = capabilities();
    auto found = std::find_if(all.begin(), all.end(), [&](const Capability& c) { return name == c.name; });
    if (!plugin.capabilities_known) {
      problems->push_back("--require " + name + ": the plugin " + plugin.library +
                          " does not say what it holds (no sieve_capabilities())");
    } else if (!(plugin.capabilities & found->bit)) {
      problems->push_back("--require " + name + ": the plugin " + plugin.library + " lacks " + found->without);
    }
  }
}

std::vector<std::string> problems_of(const Report& report) {
  std::vector<std::string> problems;
  if (!report.plugin_skipped) {
    const PluginReport& plugin = report.plugin;
    if (!plugin.error.empty()) problems.push_back("the plugin cannot be loaded: " + plugin.error);
    else if (!plugin.devices_error.empty())
      problems.push_back("the plugin " + plugin.library + " cannot start: " + plugin.devices_error);
    else if (plugin.devices.empty())
      problems.push_back("the plugin " + plugin.library + " offers no network device (see SIEVE_SOCKET_IFNAME)");
  }
  if (!report.topology.ok) problems.push_back("topology: " + report.topology.error);
  for (const auto& line : report.config_diagnostics) problems.push_back("configuration: " + line);
  return problems;
}

std::map<std::string, std::vector<std::string>> interface_addresses() {
  std::map<std::string, std::vector<std::string>> result;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return result;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_name == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const int family = entry->ifa_addr->sa_family;
    if (family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr, text, sizeof(text));
    } else if (family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(entry->ifa_addr)->sin6_addr, text, sizeof(text));
    } else {
      continue;
    }
    result[entry->ifa_name].push_back(text);
  }
  freeifaddrs(list);
  return result;
}

}  // namespace

std::vector<size_t> matrix_columns(const topology::Machine& machine) {
  std::vector<size_t> columns;
  for (size_t i = 0; i < machine.nics.size(); ++i) {
    const auto& nic = machine.nics[i];
    if (nic.is_virtual) continue;
    const bool shown_by_netdev = nic.kind == topology::NicKind::kRdma && !nic.paired.empty();
    if (!shown_by_netdev) columns.push_back(i);
  }
  return columns;
}

std::string effective_text(const config::Effective& entry) {
  if (entry.info->kind == config::Kind::kBool) {
    bool on = false;
    if (config::parse_bool(entry.value, on)) return on ? "on" : "off";
  } else if (entry.info->kind == config::Kind::kChoice) {
    int index = 0;
    if (config::parse_choice(entry.value, entry.info->choices, index)) {
      std::string choices = std::string(entry.info->choices) + "|";
      size_t start = 0;
      for (int i = 0; i < index; ++i) start = choices.find('|', start) + 1;
      return choices.substr(start, choices.find('|', start) - start);
    }
  }
  return entry.value;
}

std::string shown_value(const config::Effective& entry) {
  const std::string name = entry.info->name;
  const std::string suffix = "_TOKEN";
  const bool secret =
      name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (secret) return entry.value.empty() ? "" : "(set, not shown)";
  return entry.value;
}

std::string shown_effective(const config::Effective& entry) {
  // Another spelling the registry takes (SIEVE_TRACK=yes is on): what is in force, then what was written.
  const std::string shown = shown_value(entry);
  const std::string effective = effective_text(entry);
  return effective == entry.value ? shown : effective + " (given as " + shown + ")";
}

Report gather(const ReportOptions& options) {
  Report report;
  report.version = SIEVE_VERSION_STRING;
  const config::Registry& registry = config::Registry::process();
  report.config = registry.effective();
  report.config_diagnostics = registry.diagnostics();

  report.topo_file = options.topo_file.empty() ? registry.settings().topo_file : options.topo_file;
  topology::Options topology_options;
  topology_options.xml_file = report.topo_file;
  report.topology = topology::discover(topology_options);
  if (report.topo_file.empty()) report.addresses = interface_addresses();

  // SIEVE_STATS_FILE is checked here, and hidden from the plugin sieve-info loads: a stats file of
  // sieve-info's own, in a textfile collector's directory, would be the series of a process that
  // moved nothing.
  std::string stats_problem;
  if (!registry.settings().stats_file.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const std::string pattern = registry.settings().stats_file;
    const std::string path = plugin::expand_stats_path(pattern, static_cast<int>(getpid()), host);
    stats_problem = plugin::stats_path_problem(path);
    std::string unwritable;
    if (stats_problem.empty() && !plugin::stats_directory_writable(path, &unwritable)) stats_problem = unwritable;
    if (!stats_problem.empty()) stats_problem = "SIEVE_STATS_FILE=" + pattern + ": " + stats_problem;
    unsetenv("SIEVE_STATS_FILE");
  }

  std::string copies_problem;
  report.plugin_skipped = options.skip_plugin;
  if (!options.skip_plugin) {
    // Before the plugin is loaded here: once a copy is mapped, a load by name returns it.
    const std::string libdir = tools::installed_libdir();
    const std::string multiarch = libdir.rfind("lib/", 0) == 0 ? libdir.substr(4) : "";
    report.copies = find_library_copies("libnccl-net-sieve.so", multiarch);
    report.plugin = inspect_plugin(options.plugin_path);
    report.plugin.topology_file = registry.settings().topo_file;
    // The plugin read SIEVE_TOPO_FILE or this machine; --topo may describe another one.
    topology::Discovery plugin_view;
    if (report.plugin.topology_file != report.topo_file) {
      topology::Options plugin_options;
      plugin_options.xml_file = report.plugin.topology_file;
      plugin_view = topology::discover(plugin_options);
    }
    const topology::Machine& machine =
        report.plugin.topology_file != report.topo_file ? plugin_view.machine : report.topology.machine;
    for (const auto& device : report.plugin.devices) {
      const topology::Nic* nic = machine.find_nic(device.name);
      report.plugin.speed_assumed.push_back((nic == nullptr || nic->speed_mbps <= 0) &&
                                            device.speed_mbps == net::Device::kUnknownSpeedMbps);
    }
  }
  net::TransportOptions shape_options;
  shape_options.nsocks = static_cast<int>(registry.settings().nsocks);
  shape_options.nthreads = static_cast<int>(registry.settings().nthreads);
  for (const auto& device : report.plugin.devices) {
    const topology::Nic* nic = report.topology.machine.find_nic(device.name);
    net::StripeShape shape = net::stripe_shape(shape_options, device.speed_mbps, nic ? nic->vendor_id : 0);
    shape.nthreads = std::min(shape.nthreads, shape.nsocks);  // a helper drives at least one socket
    report.plugin.shapes.push_back(shape);
  }
  if (!options.skip_plugin) {
    // An installed sieve-info checking its own copy while jobs load another checks the wrong
    // library: a prolog would pass a node whose jobs run something else. (A build tree's copy is
    // expected to differ from the installed one; --plugin asks for that library on purpose.)
    const std::string inspected =
        report.plugin.library_file.empty() ? report.plugin.library : report.plugin.library_file;
    if (options.plugin_path.empty() && tools::InstallLayout::current().build_dir().empty() &&
        !report.copies.by_name.empty() && !same_file(report.copies.by_name, inspected))
      copies_problem = "NCCL_NET_PLUGIN=sieve and LD_PRELOAD=libnccl-net-sieve.so load " + report.copies.by_name +
                       ", not " + inspected +
                       " checked here: run the sieve-info installed beside that copy, or "
                       "remove one copy (" +
                       std::to_string(report.copies.copies.size()) + " found, see Copies)";
  }
  std::vector<std::string> rdma_problems;
  net::TransportOptions ib_options;
  report.ib_settings = plugin::resolve_ib_options(registry, std::getenv, &ib_options);
  report.rdma = inspect_rdma(report.topology.machine, registry.settings(), ib_options, &rdma_problems);
  choose_transport(registry.settings(), &report);
  report.problems = problems_of(report);
  if (!options.skip_plugin) require_capabilities(report.plugin, options.required, &report.problems);
  if (!copies_problem.empty()) report.problems.push_back(copies_problem);
  if (!stats_problem.empty()) report.problems.push_back(stats_problem + "; traffic statistics would not be exported");
  report.problems.insert(report.problems.end(), rdma_problems.begin(), rdma_problems.end());
  const config::Scope in_use = report.transport == "ib" ? config::Scope::kVerbs : config::Scope::kTcp;
  const auto unused = registry.set_without_effect(in_use);
  if (!unused.empty())
    report.problems.push_back(config::without_effect_text(unused, in_use) + " (" + report.transport_why + ")");
  return report;
}

const std::vector<Capability>& capabilities() {
  static const std::vector<Capability> all = {
      {"proxy", SIEVE_CAP_PROXY,
       "the collective proxy (built without CUDA: under LD_PRELOAD it intercepts no collective)"},
      {"cuda-compact", SIEVE_CAP_CUDA_COMPACT,
       "Sieve's CUDA gather/scatter (built without CUDA: sieve.ddp and sieve.fsdp use torch's)"},
      {"host-compact", SIEVE_CAP_HOST_COMPACT, "Sieve's CPU gather/scatter (a library older than them)"},
      {"verbs", SIEVE_CAP_VERBS, "the verbs transport (built without infiniband/verbs.h: TCP only)"},
  };
  return all;
}

}  // namespace sieve::info
