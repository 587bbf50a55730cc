// SPDX-License-Identifier: Apache-2.0
#include "topology/machine.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace sieve::topology {

const Nic* Machine::find_nic(const std::string& name) const {
  for (const auto& nic : nics)
    if (nic.name == name) return &nic;
  return nullptr;
}

size_t Machine::pci_device_count() const {
  size_t count = 0;
  for (const auto& nic : nics) count += nic.pci_bus_id.empty() ? 0 : 1;
  for (const auto& gpu : gpus) count += gpu.pci_bus_id.empty() ? 0 : 1;
  return count;
}

const char* source_name(Source source) {
  switch (source) {
    case Source::kLiveHwloc: return "hwloc";
    case Source::kTopologyFile: return "topology file";
    case Source::kSysfs: return "sysfs";
  }
  return "?";
}

const char* nic_kind_name(NicKind kind) { return kind == NicKind::kRdma ? "rdma" : "netdev"; }

const char* path_class_name(PathClass path) {
  switch (path) {
    case PathClass::kPIX: return "PIX";
    case PathClass::kPXB: return "PXB";
    case PathClass::kPHB: return "PHB";
    case PathClass::kNODE: return "NODE";
    case PathClass::kSYS: return "SYS";
  }
  return "?";
}

PathClass classify(const Placement& a, const Placement& b) {
  const bool same_numa = a.numa_node >= 0 && a.numa_node == b.numa_node;
  // Without a PCI chain on both sides only the NUMA node tells them apart.
  if (a.pci_upstream.empty() || b.pci_upstream.empty() || a.pci_upstream[0] != b.pci_upstream[0])
    return same_numa ? PathClass::kNODE : PathClass::kSYS;

  size_t common = 0;
  while (common < a.pci_upstream.size() && common < b.pci_upstream.size() &&
         a.pci_upstream[common] == b.pci_upstream[common])
    ++common;
  if (common == 1) return PathClass::kPHB;  // they meet only at the host bridge

  // They meet at a PCI bridge: a switch's upstream port, with at most its downstream port between
  // it and each device, is one switch (NCCL also counts a switch's two port levels as one hop).
  const size_t below_a = a.pci_upstream.size() - common;
  const size_t below_b = b.pci_upstream.size() - common;
  return below_a <= 1 && below_b <= 1 ? PathClass::kPIX : PathClass::kPXB;
}

int best_nic_for(const Machine& machine, size_t gpu_index, NicKind kind) {
  if (gpu_index >= machine.gpus.size()) return -1;
  const Gpu& gpu = machine.gpus[gpu_index];
  int best = -1;
  auto better = [&](const Nic& candidate, const Nic& current) {
    if (candidate.is_virtual != current.is_virtual) return !candidate.is_virtual;
    const PathClass c = classify(gpu, candidate), k = classify(gpu, current);
    if (c != k) return c < k;
    return candidate.speed_mbps > current.speed_mbps;
  };
  for (size_t i = 0; i < machine.nics.size(); ++i) {
    const Nic& nic = machine.nics[i];
    if (nic.kind != kind) continue;
    if (best < 0 || better(nic, machine.nics[static_cast<size_t>(best)])) best = static_cast<int>(i);
  }
  return best;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::vector<int> sorted(cpus);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string text;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(sorted[i]);
    if (j > i) text += '-' + std::to_string(sorted[j]);
    i = j + 1;
  }
  return text;
}

namespace {

bool parse_cpu_number(const std::string& text, int& out) {
  if (text.empty() || text.size() > 7 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::atoi(text.c_str());
  return true;
}

}  // namespace

bool parse_cpu_list(const std::string& text, std::vector<int>& cpus, std::string& error) {
  std::vector<int> result;
  std::string trimmed = text;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
  size_t start = 0;
  while (start < trimmed.size()) {
    size_t comma = trimmed.find(',', start);
    if (comma == std::string::npos) comma = trimmed.size();
    const std::string item = trimmed.substr(start, comma - start);
    const size_t dash = item.find('-');
    int first = 0, last = 0;
    bool ok = dash == std::string::npos
                  ? parse_cpu_number(item, first) && parse_cpu_number(item, last)
                  : parse_cpu_number(item.substr(0, dash), first) && parse_cpu_number(item.substr(dash + 1), last);
    if (!ok || last < first) {
      error = "bad CPU list item '" + item + "' in '" + trimmed + "'";
      return false;
    }
    for (int cpu = first; cpu <= last; ++cpu) result.push_back(cpu);
    start = comma + 1;
  }
  cpus = std::move(result);
  return true;
}

std::string summary(const Nic& nic) {
  std::string text = nic.name + " (" + (nic.is_virtual ? "virtual " : "") + nic_kind_name(nic.kind) + ")";
  text += " pci " + (nic.pci_bus_id.empty() ? std::string("-") : nic.pci_bus_id);
  text += " numa " + (nic.numa_node < 0 ? std::string("-") : std::to_string(nic.numa_node));
  text += " cpus " + (nic.cpus.empty() ? std::string("-") : cpu_list_text(nic.cpus));
  text += " speed " + (nic.speed_mbps > 0 ? std::to_string(nic.speed_mbps) + " Mb/s" : std::string("unknown"));
  return text;
}

uint64_t card_guid(const std::string& pci_bus_id, const std::string& name) {
  // FNV-1a: stable across runs and hosts, so the same card gets the same guid everywhere.
  std::string key = name;
  const size_t dot = pci_bus_id.rfind('.');
  if (!pci_bus_id.empty() && dot != std::string::npos) key = "pci:" + pci_bus_id.substr(0, dot);
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : key) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace sieve::topology
