// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <iomanip>
#include <sstream>

#include "tools/sieve-info/output.h"

namespace sieve::info {

namespace {

std::string or_dash(const std::string& text) { return text.empty() ? "-" : text; }
std::string number_or_dash(int64_t value) { return value < 0 ? "-" : std::to_string(value); }

std::string speed_text(int64_t mbps) {
  if (mbps <= 0) return "-";
  if (mbps % 1000 == 0) return std::to_string(mbps / 1000) + " Gb/s";
  return std::to_string(mbps) + " Mb/s";
}

// A NIC's link speed in the topology: unknown (VMs, down links, topology files) says so.
std::string link_speed_text(int64_t mbps) { return mbps <= 0 ? "unknown" : speed_text(mbps); }

// Rows of cells in columns as wide as their widest cell, two spaces apart, so no cell ever runs
// into the next; the last cell of a row is not padded. A free line (a row's continuation) is
// printed as is and does not size the columns.
class Table {
 public:
  void row(std::vector<std::string> cells) { rows_.push_back({std::move(cells), false}); }
  void free_line(std::string text) { rows_.push_back({{std::move(text)}, true}); }

  void print(std::ostream& out, const std::string& indent) const {
    std::vector<size_t> widths;
    for (const auto& r : rows_) {
      if (r.free) continue;
      if (widths.size() < r.cells.size()) widths.resize(r.cells.size(), 0);
      for (size_t c = 0; c + 1 < r.cells.size(); ++c) widths[c] = std::max(widths[c], r.cells[c].size());
    }
    for (const auto& r : rows_) {
      out << indent;
      if (r.free) {
        out << r.cells[0] << "\n";
        continue;
      }
      for (size_t c = 0; c < r.cells.size(); ++c) {
        out << r.cells[c];
        if (c + 1 < r.cells.size()) out << std::string(widths[c] - r.cells[c].size() + 2, ' ');
      }
      out << "\n";
    }
  }

 private:
  struct Row {
    std::vector<std::string> cells;
    bool free;
  };
  std::vector<Row> rows_;
};

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : separator) + item;
  return text;
}

void print_plugin(const Report& report, std::ostream& out) {
  out << "Plugin\n";
  if (report.plugin_skipped) {
    out << "  (not loaded: --no-plugin)\n\n";
    return;
  }
  const PluginReport& plugin = report.plugin;
  out << "  library       " << plugin.library;
  if (!plugin.library_file.empty() && plugin.library_file != plugin.library) out << " (" << plugin.library_file << ")";
  out << "\n";
  if (!plugin.error.empty()) {
    out << "  error         " << plugin.error << "\n\n";
    return;
  }
  out << "  ABI versions ";
  for (int version : plugin.abi_versions) out << " ncclNetPlugin_v" << version;
  out << "\n  name          " << or_dash(plugin.name) << " (driven through v" << plugin.used_version << ")\n";
  if (plugin.capabilities_known) {
    std::string has, lacks;
    for (const auto& capability : capabilities()) {
      std::string& into = (plugin.capabilities & capability.bit) ? has : lacks;
      into += (into.empty() ? "" : ", ") + std::string(capability.name);
    }
    out << "  capabilities  " << or_dash(has) << (lacks.empty() ? "" : " (lacks " + lacks + ")") << "\n";
  }
  if (!plugin.devices_error.empty()) out << "  error         " << plugin.devices_error << "\n";
  if (plugin.topology_file != report.topo_file)
    out << "  note          the devices are this machine's interfaces, as the plugin finds them"
        << (plugin.topology_file.empty() ? "" : " (placed with SIEVE_TOPO_FILE " + plugin.topology_file + ")")
        << "; the file given to --topo describes only the sections below\n";
  for (size_t i = 0; i < plugin.devices.size(); ++i) {
    const auto& device = plugin.devices[i];
    const bool assumed = i < plugin.speed_assumed.size() && plugin.speed_assumed[i];
    out << "  device " << i << "      " << device.name << "  pciPath " << or_dash(device.pci_path) << "  speed "
        << speed_text(device.speed_mbps) << (assumed ? " (assumed: link speed unknown)" : "") << "  guid "
        << hex(device.guid) << "  port " << device.port;
    if (i < plugin.shapes.size())
      out << "  connections: " << plugin.shapes[i].nsocks << " socket(s) x " << plugin.shapes[i].nthreads
          << " thread(s)";
    out << "\n";
  }
  if (plugin.devices.empty() && plugin.devices_error.empty()) out << "  devices       none\n";
  out << "\n";
}

void print_machine(const Report& report, std::ostream& out) {
  const topology::Machine& machine = report.topology.machine;
  if (report.topo_file.empty())
    out << "Topology        this machine, read with " << topology::source_name(machine.source) << "\n";
  else out << "Topology        file " << report.topo_file << "\n";
  if (!report.topology.ok) {
    out << "  error         " << report.topology.error << "\n\n";
    return;
  }
  for (const auto& note : machine.notes) out << "  note          " << note << "\n";
  out << "  CPUs          " << topology::cpu_list_text(machine.cpus) << "\n";
  for (const auto& node : machine.numa_nodes)
    out << "  NUMA node " << node.os_index << "   CPUs " << topology::cpu_list_text(node.cpus) << "  memory "
        << node.memory_bytes / (1024 * 1024) << " MiB\n";

  out << "\nNICs\n";
  Table nics;
  nics.row({"name", "kind", "PCI", "NUMA", "CPUs", "speed", "paired", "addresses"});
  for (const auto& nic : machine.nics) {
    auto found = report.addresses.find(nic.name);
    std::string addresses = found != report.addresses.end() ? join(found->second, " ") : "";
    if (!nic.address.empty()) addresses += (addresses.empty() ? "" : " ") + std::string("hw ") + nic.address;
    nics.row({nic.name, nic.is_virtual ? "virtual" : topology::nic_kind_name(nic.kind), or_dash(nic.pci_bus_id),
              number_or_dash(nic.numa_node), or_dash(topology::cpu_list_text(nic.cpus)),
              link_speed_text(nic.speed_mbps), or_dash(nic.paired), or_dash(addresses)});
    if (!nic.pci_path.empty()) nics.free_line("  pciPath " + nic.pci_path);
  }
  nics.print(out, "  ");

  out << "\nGPUs\n";
  if (machine.gpus.empty()) out << "  none\n";
  for (size_t g = 0; g < machine.gpus.size(); ++g) {
    const auto& gpu = machine.gpus[g];
    out << "  GPU" << g << "  " << gpu.pci_bus_id << "  NUMA " << number_or_dash(gpu.numa_node) << "  CPUs "
        << or_dash(topology::cpu_list_text(gpu.cpus)) << "  CUDA index " << number_or_dash(gpu.cuda_index) << "\n";
  }
}

#if SIEVE_HAVE_VERBS
const char* link_layer_name(net::ib::LinkLayer layer) {
  return layer == net::ib::LinkLayer::kEthernet ? "RoCE" : "InfiniBand";
}

const char* gid_type_name(net::ib::GidType type) {
  switch (type) {
    case net::ib::GidType::kRoCEv2: return "RoCE v2";
    case net::ib::GidType::kRoCEv1: return "RoCE v1";
    case net::ib::GidType::kIB: break;
  }
  return "IB";
}

std::string gpu_list_text(const std::vector<int>& gpus) {
  std::vector<std::string> names;
  for (int g : gpus) names.push_back("GPU" + std::to_string(g));
  return join(names, ",");
}
#endif

void print_rdma(const Report& report, std::ostream& out) {
  const RdmaReport& rdma = report.rdma;
  out << "\nRDMA devices";
  if (rdma.library.empty()) {
    out << "\n  none usable: " << rdma.error << "\n";
    return;
  }
#if SIEVE_HAVE_VERBS
  out << " (verbs from " << rdma.library << ")\n";
  for (const auto& note : rdma.notes) out << "  note          " << note << "\n";
  if (!rdma.error.empty()) out << "  error         " << rdma.error << "\n";
  if (rdma.ports.empty()) {
    out << "  none\n";
    return;
  }
  Table ports;
  ports.row(
      {"port", "link", "state", "speed", "MTU", "netdev", "PCI", "NUMA", "near GPUs", "dma-buf", "GID used", "use"});
  for (size_t i = 0; i < rdma.ports.size(); ++i) {
    const net::ib::IbPort& p = rdma.ports[i];
    std::string gid = "-";
    for (const auto& e : p.gids)
      if (e.index == rdma.gid_index[i]) gid = std::to_string(e.index) + " " + e.text();
    ports.row({p.name(), link_layer_name(p.link_layer), p.active ? "active" : "down", link_speed_text(p.speed_mbps),
               number_or_dash(p.mtu_bytes > 0 ? p.mtu_bytes : -1), or_dash(p.netdev), or_dash(p.placement.pci_bus_id),
               number_or_dash(p.placement.numa_node), or_dash(gpu_list_text(p.near_gpus)), p.dmabuf ? "yes" : "no", gid,
               rdma.selected[i] ? "selected" : "-"});
    if (p.link_layer == net::ib::LinkLayer::kInfiniBand) ports.free_line("    LID " + std::to_string(p.lid));
    for (const auto& e : p.gids)
      ports.free_line("    GID " + std::to_string(e.index) + "  " + gid_type_name(e.type) + "  " + e.text() +
                      (e.netdev.empty() ? "" : "  " + e.netdev));
  }
  ports.print(out, "  ");
#endif
}

void print_matrix(const topology::Machine& machine, std::ostream& out) {
  const std::vector<size_t> columns = matrix_columns(machine);
  if (machine.gpus.empty() || columns.empty()) return;
  out << "\nGPU x NIC (like nvidia-smi topo -m)\n  " << std::left << std::setw(7) << "";
  for (size_t column : columns)
    out << std::setw(std::max<int>(6, static_cast<int>(machine.nics[column].name.size()) + 2))
        << machine.nics[column].name;
  out << std::setw(12) << "CPU Affinity"
      << "  " << std::setw(6) << "NUMA"
      << "best NIC\n";
  for (size_t g = 0; g < machine.gpus.size(); ++g) {
    const auto& gpu = machine.gpus[g];
    out << "  " << std::setw(7) << ("GPU" + std::to_string(g));
    for (size_t column : columns)
      out << std::setw(std::max<int>(6, static_cast<int>(machine.nics[column].name.size()) + 2))
          << topology::path_class_name(topology::classify(gpu, machine.nics[column]));
    const int best = topology::best_nic_for(machine, g);
    out << std::setw(12) << or_dash(topology::cpu_list_text(gpu.cpus)) << "  " << std::setw(6)
        << number_or_dash(gpu.numa_node) << (best >= 0 ? machine.nics[static_cast<size_t>(best)].name : "-") << "\n";
  }
  out << "\n  PIX  = at most one PCIe switch between them\n"
         "  PXB  = several PCIe switches, without the host bridge\n"
         "  PHB  = through the PCIe host bridge (the CPU's root complex)\n"
         "  NODE = between host bridges within a NUMA node\n"
         "  SYS  = across NUMA nodes (the socket interconnect)\n";
}

void print_config(const Report& report, std::ostream& out) {
  out << "\nTransport\n  " << report.transport << " (" << report.transport_why << ")\n";
  out << "\nConfiguration (\"tcp only\", \"ib only\": read by that transport alone)\n";
  Table table;
  for (const auto& entry : report.config) {
    const std::string value = shown_effective(entry);
    const config::Scope scope = entry.info->scope;
    table.row({entry.info->name, value.empty() ? "(empty)" : value,
               entry.source == config::Source::kEnvironment ? "environment" : "default",
               scope == config::Scope::kAny ? "" : std::string(config::scope_name(scope)) + " only", entry.info->doc});
  }
  table.print(out, "  ");
  // Former names, so a job script's old name is explained before the job warns about it.
  for (const config::FormerName& f : config::former_names()) {
    if (*f.replacement) out << "  " << f.name << ": deprecated, renamed " << f.replacement << " in " << f.since << "\n";
    else out << "  " << f.name << ": retired in " << f.since << ": " << f.instead << "\n";
  }
  for (const auto& line : report.config_diagnostics) out << "  problem: " << line << "\n";
  if (report.ib_settings.empty()) return;
  out << "\nVerbs settings NCCL's IB transport shares (the SIEVE_IB_* variable, else NCCL's, else the default)\n";
  Table shared;
  for (const auto& s : report.ib_settings)
    shared.row({s.sieve_name, s.value.empty() ? "(empty)" : s.value,
                s.origin == plugin::Origin::kSieve  ? std::string("from ") + s.sieve_name
                : s.origin == plugin::Origin::kNccl ? std::string("from ") + s.nccl_name
                                                    : std::string("default (") + s.nccl_name + " unset)"});
  shared.print(out, "  ");
}

// Which copy is which: a second install (the .deb and a cmake --install to /usr/local) is otherwise
// silent, and NCCL, LD_PRELOAD and sieve-info may each take another one.
void print_copies(const Report& report, std::ostream& out) {
  if (report.plugin_skipped) return;
  const CopiesReport& copies = report.copies;
  const std::string inspected = report.plugin.library_file.empty() ? report.plugin.library : report.plugin.library_file;
  out << "Copies of " << copies.name << " the dynamic loader finds (in its order)\n";
  if (copies.copies.empty()) out << "  none\n";
  for (const auto& copy : copies.copies) {
    std::vector<std::string> roles;
    if (!copies.by_name.empty() && same_file(copy.path, copies.by_name))
      roles.push_back("NCCL_NET_PLUGIN=sieve and LD_PRELOAD=" + copies.name + " load this one");
    if (same_file(copy.path, inspected)) roles.push_back("inspected above");
    out << "  " << copy.path << "  (" << copy.found_by << ")" << (roles.empty() ? "" : ": " + join(roles, "; "))
        << "\n";
  }
  if (copies.by_name.empty())
    out << "  by name: " << copies.name << " cannot be loaded (" << copies.by_name_error << ")\n";
  if (!inspected.empty() && !copies.by_name.empty() && !same_file(inspected, copies.by_name))
    out << "  note: the library inspected above is not the one a load by name takes\n";
  if (copies.copies.size() > 1)
    out << "  note: " << copies.copies.size()
        << " copies: remove the one not wanted (a cmake --install: `cmake --build BUILD --target uninstall`)\n";
  out << "\n";
}

}  // namespace

void print_text(const Report& report, std::ostream& out) {
  out << "sieve-info " << report.version << (report.rdma.built ? "" : " (TCP only: built without verbs)") << "\n\n";
  print_plugin(report, out);
  print_copies(report, out);
  print_machine(report, out);
  if (report.topology.ok) print_matrix(report.topology.machine, out);
  print_rdma(report, out);
  print_config(report, out);
}

}  // namespace sieve::info
