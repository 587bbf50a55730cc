// SPDX-License-Identifier: Apache-2.0
#include <cstdio>

#include "tools/common/json_writer.h"
#include "tools/sieve-info/output.h"

namespace sieve::info {

using tools::JsonWriter;

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

namespace {

void write_plugin(JsonWriter& json, const Report& report) {
  json.key("plugin");
  if (report.plugin_skipped) {
    json.null();
    return;
  }
  const PluginReport& plugin = report.plugin;
  json.begin_object();
  json.member("library", plugin.library);
  json.member("library_file", plugin.library_file);
  json.member("error", plugin.error);
  json.key("abi_versions");
  json.begin_array();
  for (int version : plugin.abi_versions) json.value(version);
  json.end_array();
  json.member("used_version", plugin.used_version);
  json.member("name", plugin.name);
  json.key("capabilities");  // null: not known (not loaded, or no sieve_capabilities())
  if (plugin.capabilities_known) {
    json.begin_array();
    for (const auto& capability : capabilities())
      if (plugin.capabilities & capability.bit) json.value(std::string(capability.name));
    json.end_array();
  } else {
    json.null();
  }
  json.key("devices");
  json.begin_array();
  for (size_t i = 0; i < plugin.devices.size(); ++i) {
    const auto& device = plugin.devices[i];
    json.begin_object();
    json.member("index", static_cast<int64_t>(i));
    json.member("name", device.name);
    json.member("pci_path", device.pci_path);
    json.member("guid", hex(device.guid));
    json.member("speed_mbps", device.speed_mbps);
    json.member("speed_assumed", i < plugin.speed_assumed.size() && plugin.speed_assumed[i]);
    json.member("port", device.port);
    json.member("latency_us", static_cast<double>(device.latency_us));
    json.member("max_comms", device.max_comms);
    json.member("max_recvs", device.max_recvs);
    json.member("ptr_support", device.ptr_support);
    if (i < plugin.shapes.size()) {
      json.member("sockets_per_connection", plugin.shapes[i].nsocks);
      json.member("threads_per_connection", plugin.shapes[i].nthreads);
    }
    json.end_object();
  }
  json.end_array();
  json.member("devices_error", plugin.devices_error);
  json.member("topology_file", plugin.topology_file);
  json.end_object();
}

void write_placement(JsonWriter& json, const topology::Placement& where) {
  json.member("pci_bus_id", where.pci_bus_id);
  json.member("pci_path", where.pci_path);
  json.member_strings("pci_upstream", where.pci_upstream);
  json.member("numa_node", where.numa_node);
  json.member("cpus", topology::cpu_list_text(where.cpus));
  json.member("vendor_id", hex(where.vendor_id));
  json.member("device_id", hex(where.device_id));
}

void write_topology(JsonWriter& json, const Report& report) {
  const topology::Machine& machine = report.topology.machine;
  json.key("topology");
  json.begin_object();
  json.member("ok", report.topology.ok);
  json.member("error", report.topology.error);
  json.member("file", report.topo_file);
  json.member("source", topology::source_name(machine.source));
  json.member_strings("notes", machine.notes);
  json.member("cpus", topology::cpu_list_text(machine.cpus));

  json.key("numa_nodes");
  json.begin_array();
  for (const auto& node : machine.numa_nodes) {
    json.begin_object();
    json.member("os_index", node.os_index);
    json.member("cpus", topology::cpu_list_text(node.cpus));
    json.member("memory_bytes", node.memory_bytes);
    json.end_object();
  }
  json.end_array();

  json.key("nics");
  json.begin_array();
  for (const auto& nic : machine.nics) {
    json.begin_object();
    json.member("name", nic.name);
    json.member("kind", topology::nic_kind_name(nic.kind));
    json.member("virtual", nic.is_virtual);
    auto found = report.addresses.find(nic.name);
    json.member_strings("addresses", found != report.addresses.end() ? found->second : std::vector<std::string>{});
    json.member("hw_address", nic.address);
    write_placement(json, nic);
    json.member("sysfs_device_path", nic.sysfs_device_path);
    json.member("speed_mbps", nic.speed_mbps);
    json.member("guid", hex(nic.guid));
    json.member("paired", nic.paired);
    json.end_object();
  }
  json.end_array();

  json.key("gpus");
  json.begin_array();
  for (size_t g = 0; g < machine.gpus.size(); ++g) {
    const auto& gpu = machine.gpus[g];
    json.begin_object();
    json.member("index", static_cast<int64_t>(g));
    json.member("cuda_index", gpu.cuda_index);
    write_placement(json, gpu);
    const int best = topology::best_nic_for(machine, g);
    json.member("best_nic", best >= 0 ? machine.nics[static_cast<size_t>(best)].name : "");
    json.end_object();
  }
  json.end_array();

  const std::vector<size_t> columns = matrix_columns(machine);
  json.key("matrix");
  json.begin_object();
  json.key("nics");
  json.begin_array();
  for (size_t column : columns) json.value(machine.nics[column].name);
  json.end_array();
  json.key("rows");
  json.begin_array();
  for (const auto& gpu : machine.gpus) {
    json.begin_array();
    for (size_t column : columns) json.value(topology::path_class_name(topology::classify(gpu, machine.nics[column])));
    json.end_array();
  }
  json.end_array();
  json.end_object();
  json.end_object();
}

void write_rdma(JsonWriter& json, const Report& report) {
  const RdmaReport& rdma = report.rdma;
  json.key("rdma");
  json.begin_object();
  json.member("built", rdma.built);
  json.member("library", rdma.library);
  json.member("error", rdma.error);
  json.member_strings("notes", rdma.notes);
  json.key("ports");
  json.begin_array();
#if SIEVE_HAVE_VERBS
  for (size_t i = 0; i < rdma.ports.size(); ++i) {
    const net::ib::IbPort& p = rdma.ports[i];
    json.begin_object();
    json.member("name", p.name());
    json.member("device", p.device);
    json.member("port", p.port);
    json.member("link_layer", p.link_layer == net::ib::LinkLayer::kEthernet ? "ethernet" : "infiniband");
    json.member("active", p.active);
    json.member("speed_mbps", p.speed_mbps);
    json.member("mtu_bytes", p.mtu_bytes);
    json.member("lid", static_cast<int>(p.lid));
    json.member("guid", hex(p.guid));
    json.member("netdev", p.netdev);
    json.member("dmabuf", p.dmabuf);
    json.member("selected", static_cast<bool>(rdma.selected[i]));
    json.member("gid_index", rdma.gid_index[i]);
    write_placement(json, p.placement);
    json.key("near_gpus");
    json.begin_array();
    for (int g : p.near_gpus) json.value(g);
    json.end_array();
    json.key("gids");
    json.begin_array();
    for (const auto& e : p.gids) {
      json.begin_object();
      json.member("index", e.index);
      json.member("gid", e.text());
      json.member("type", e.type == net::ib::GidType::kRoCEv2   ? "roce_v2"
                          : e.type == net::ib::GidType::kRoCEv1 ? "roce_v1"
                                                                : "ib");
      json.member("netdev", e.netdev);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
#endif
  json.end_array();
  json.end_object();
}

void write_config(JsonWriter& json, const Report& report) {
  json.key("config");
  json.begin_array();
  for (const auto& entry : report.config) {
    json.begin_object();
    json.member("name", entry.info->name);
    json.member("kind", config::kind_name(entry.info->kind));
    json.member("value", shown_value(entry));
    json.member("effective",
                entry.info->kind == config::Kind::kString ? shown_value(entry) : effective_text(entry));  // in force
    json.member("default", entry.info->default_text);
    json.member("source", entry.source == config::Source::kEnvironment ? "environment" : "default");
    json.member("choices", entry.info->choices);
    json.member("range", config::range_text(*entry.info));
    json.member("transport", config::scope_name(entry.info->scope));
    json.member("doc", entry.info->doc);
    json.end_object();
  }
  json.end_array();
  json.key("former_names");
  json.begin_array();
  for (const config::FormerName& f : config::former_names()) {
    json.begin_object();
    json.member("name", f.name);
    json.member("status", *f.replacement ? "deprecated" : "retired");
    json.member("replacement", f.replacement);
    json.member("since", f.since);
    json.member("instead", f.instead);
    json.end_object();
  }
  json.end_array();
  json.member_strings("diagnostics", report.config_diagnostics);
  json.key("ib_settings");
  json.begin_array();
  for (const auto& s : report.ib_settings) {
    json.begin_object();
    json.member("name", s.sieve_name);
    json.member("nccl_name", s.nccl_name);
    json.member("value", s.value);
    json.member("from", plugin::origin_name(s.origin));
    json.end_object();
  }
  json.end_array();
}

}  // namespace

void print_json(const Report& report, std::ostream& out) {
  JsonWriter json(out);
  json.begin_object();
  json.member("tool", "sieve-info");
  json.member("version", report.version);
  write_plugin(json, report);
  if (!report.plugin_skipped) {
    json.key("copies");
    json.begin_object();
    json.member("name", report.copies.name);
    json.member("by_name", report.copies.by_name);
    json.member("by_name_error", report.copies.by_name_error);
    json.key("found");
    json.begin_array();
    for (const auto& copy : report.copies.copies) {
      json.begin_object();
      json.member("path", copy.path);
      json.member("found_by", copy.found_by);
      json.member("loaded_by_name", !report.copies.by_name.empty() && same_file(copy.path, report.copies.by_name));
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  write_topology(json, report);
  write_rdma(json, report);
  json.key("transport");
  json.begin_object();
  json.member("name", report.transport);
  json.member("why", report.transport_why);
  json.end_object();
  write_config(json, report);
  json.member_strings("problems", report.problems);
  json.end_object();
  out << '\n';
}

}  // namespace sieve::info
