// SPDX-License-Identifier: Apache-2.0
// sieve-gpu-probe: what this machine offers the GPU kit, asked of the driver itself. It loads
// libcuda.so.1 and libnccl.so.2 at run time (it links neither, so it runs on a machine without a
// driver and says so) and reports the driver's CUDA version against the runtime the kit was built
// with, every GPU, and the NCCL the dynamic loader finds.
//
//   sieve-gpu-probe [--json FILE]
// Prints one line per fact. Exit status: 0 = a usable GPU; 77 = no GPU (no driver library, the
// toolkit's stub library, or no device); 1 = a driver is there but unusable (cuInit fails otherwise,
// or its CUDA major version is older than the kit's runtime's). A driver of the same major version but
// an older minor one runs the kit (CUDA's minor version compatibility): a warning, not a failure.
#include <cuda.h>
#include <cuda_runtime_api.h>  // CUDART_VERSION: the runtime the kit's programs are linked with
#include <dlfcn.h>
#include <link.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tools/common/json_writer.h"

namespace {

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The file a dlopen handle was loaded from.
std::string loaded_path(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name) return "";
  return map->l_name;
}

struct Device {
  std::string name, pci_bus_id;
  int major = 0, minor = 0;
  size_t memory = 0;
};

struct Report {
  std::string driver_library, driver_error;
  int driver_version = 0;
  std::vector<Device> devices;
  std::string nccl_library, nccl_version, nccl_error;
  int exit_code = 0;
  std::string verdict, warning;
};

void probe_driver(Report* r) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    const char* why = dlerror();
    r->driver_error = why ? why : "dlopen failed";
    r->exit_code = 77;
    r->verdict = "no GPU: the driver library libcuda.so.1 cannot be loaded (" + r->driver_error + ")";
    return;
  }
  r->driver_library = loaded_path(cuda);
  auto sym = [&](const char* name) { return dlsym(cuda, name); };
  auto init = reinterpret_cast<decltype(&cuInit)>(sym("cuInit"));
  auto driver_get_version = reinterpret_cast<decltype(&cuDriverGetVersion)>(sym("cuDriverGetVersion"));
  auto get_count = reinterpret_cast<decltype(&cuDeviceGetCount)>(sym("cuDeviceGetCount"));
  auto get = reinterpret_cast<decltype(&cuDeviceGet)>(sym("cuDeviceGet"));
  auto get_name = reinterpret_cast<decltype(&cuDeviceGetName)>(sym("cuDeviceGetName"));
  auto get_attribute = reinterpret_cast<decltype(&cuDeviceGetAttribute)>(sym("cuDeviceGetAttribute"));
  auto total_mem = reinterpret_cast<decltype(&cuDeviceTotalMem)>(sym("cuDeviceTotalMem_v2"));
  auto bus_id = reinterpret_cast<decltype(&cuDeviceGetPCIBusId)>(sym("cuDeviceGetPCIBusId"));
  if (!init || !driver_get_version || !get_count || !get || !get_name || !get_attribute || !total_mem || !bus_id) {
    r->exit_code = 1;
    r->verdict = "driver unusable: " + r->driver_library + " lacks a basic driver API entry point";
    return;
  }
  driver_get_version(&r->driver_version);
  const CUresult init_result = init(0);
  if (init_result == CUDA_ERROR_STUB_LIBRARY) {
    r->exit_code = 77;
    r->verdict = "no GPU: libcuda.so.1 is the CUDA toolkit's stub library (" + r->driver_library + "), not a driver";
    return;
  }
  if (init_result == CUDA_ERROR_NO_DEVICE) {
    r->exit_code = 77;
    r->verdict = "no GPU: the driver sees no device (cuInit: CUDA_ERROR_NO_DEVICE)";
    return;
  }
  if (init_result != CUDA_SUCCESS) {
    r->exit_code = 1;
    r->verdict = "driver unusable: cuInit failed with error " + std::to_string(int(init_result)) +
                 " (see cuda.h's CUresult; a driver/kernel module mismatch is error 803)";
    return;
  }
  int count = 0;
  get_count(&count);
  for (int i = 0; i < count; ++i) {
    CUdevice device;
    if (get(&device, i) != CUDA_SUCCESS) continue;
    Device d;
    char text[256] = {0};
    if (get_name(text, sizeof text - 1, device) == CUDA_SUCCESS) d.name = text;
    get_attribute(&d.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    get_attribute(&d.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    total_mem(&d.memory, device);
    std::memset(text, 0, sizeof text);
    if (bus_id(text, sizeof text - 1, device) == CUDA_SUCCESS) d.pci_bus_id = text;
    r->devices.push_back(d);
  }
  if (r->devices.empty()) {
    r->exit_code = 77;
    r->verdict = "no GPU: the driver lists no device";
  } else if (r->driver_version / 1000 < CUDART_VERSION / 1000) {
    r->exit_code = 1;
    r->verdict = "driver too old: it supports CUDA " + cuda_version_text(r->driver_version) +
                 ", the kit's programs are built with CUDA " + cuda_version_text(CUDART_VERSION) +
                 " (install a driver of that CUDA major version or later)";
  } else {
    if (r->driver_version < CUDART_VERSION)
      r->warning = "the driver supports CUDA " + cuda_version_text(r->driver_version) + ", older than the kit's " +
                   cuda_version_text(CUDART_VERSION) + ": minor version compatibility runs the kit's programs";
    r->verdict = "GPU ready";
  }
}

void probe_nccl(Report* r) {
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!nccl) {
    const char* why = dlerror();
    r->nccl_error = why ? why : "dlopen failed";
    return;
  }
  r->nccl_library = loaded_path(nccl);
  auto get_version = reinterpret_cast<decltype(&ncclGetVersion)>(dlsym(nccl, "ncclGetVersion"));
  int version = 0;
  if (!get_version || get_version(&version) != ncclSuccess) {
    r->nccl_error = "ncclGetVersion failed";
    return;
  }
  r->nccl_version =
      std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
}

void print_text(const Report& r) {
  std::printf("CUDA runtime of the kit: %s\n", cuda_version_text(CUDART_VERSION).c_str());
  if (r.driver_library.empty()) std::printf("driver: libcuda.so.1 not loadable: %s\n", r.driver_error.c_str());
  else std::printf("driver: %s, CUDA %s\n", r.driver_library.c_str(), cuda_version_text(r.driver_version).c_str());
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const Device& d = r.devices[i];
    std::printf("GPU %zu: %s, compute capability %d.%d, %zu MiB, PCI %s\n", i, d.name.c_str(), d.major, d.minor,
                d.memory >> 20, d.pci_bus_id.c_str());
  }
  if (r.nccl_version.empty()) std::printf("NCCL: libnccl.so.2 not loadable: %s\n", r.nccl_error.c_str());
  else std::printf("NCCL: %s (%s)\n", r.nccl_version.c_str(), r.nccl_library.c_str());
  if (!r.warning.empty()) std::printf("warning: %s\n", r.warning.c_str());
  std::printf("%s\n", r.verdict.c_str());
}

bool write_json(const Report& r, const std::string& path) {
  std::ofstream file(path);
  if (!file) return false;
  sieve::tools::JsonWriter json(file);
  json.begin_object();
  json.member("runtime_cuda", cuda_version_text(CUDART_VERSION));
  json.member("driver_library", r.driver_library);
  json.member("driver_error", r.driver_error);
  json.member("driver_cuda", r.driver_version ? cuda_version_text(r.driver_version) : "");
  json.key("devices");
  json.begin_array();
  for (const Device& d : r.devices) {
    json.begin_object();
    json.member("name", d.name);
    json.member("compute_capability", std::to_string(d.major) + "." + std::to_string(d.minor));
    json.member("memory_MiB", uint64_t(d.memory >> 20));
    json.member("pci_bus_id", d.pci_bus_id);
    json.end_object();
  }
  json.end_array();
  json.member("nccl_version", r.nccl_version);
  json.member("nccl_library", r.nccl_library);
  json.member("nccl_error", r.nccl_error);
  json.member("exit_code", r.exit_code);
  json.member("verdict", r.verdict);
  json.member("warning", r.warning);
  json.end_object();
  file << '\n';
  file.close();
  return !file.fail();
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: sieve-gpu-probe [--json FILE]\n");
      return 2;
    }
  }
  Report report;
  probe_driver(&report);
  probe_nccl(&report);
  print_text(report);
  if (!json_path.empty() && !write_json(report, json_path)) {
    std::fprintf(stderr, "sieve-gpu-probe: cannot write %s\n", json_path.c_str());
    return 1;
  }
  return report.exit_code;
}
