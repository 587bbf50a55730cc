// SPDX-License-Identifier: Apache-2.0
// Which RDMA ports Sieve can use and what it reports about them: discovery through the verbs table,
// placement from topology/ (PCI path, NUMA node, local CPUs, nearest GPUs), selection by
// SIEVE_IB_HCA in NCCL's syntax, and the GID a RoCE connection uses. Pure data once discovered.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "net/ib/verbs_library.h"
#include "net/status.h"
#include "topology/machine.h"

namespace sieve::net::ib {

enum class LinkLayer { kInfiniBand, kEthernet };
enum class GidType { kIB, kRoCEv1, kRoCEv2 };

struct GidEntry {
  int index = 0;
  ibv_gid gid{};
  GidType type = GidType::kIB;
  std::string netdev;        // the netdev this GID belongs to (RoCE), "" for InfiniBand
  std::string text() const;  // "fe80::1" / "::ffff:10.0.0.1"
};

struct IbPort {
  std::string device;  // "mlx5_0"
  int port = 1;        // 1-based, as verbs numbers them
  std::string name() const { return device + ":" + std::to_string(port); }
  LinkLayer link_layer = LinkLayer::kInfiniBand;
  bool active = false;  // IBV_PORT_ACTIVE
  int speed_mbps = 0;   // active_speed x active_width; 0 when unknown
  int mtu_bytes = 0;    // active MTU
  ibv_mtu active_mtu = IBV_MTU_1024;
  uint16_t lid = 0;            // InfiniBand only
  bool grh_required = false;   // IBV_QPF_GRH_REQUIRED: every packet needs a GRH (SR-IOV functions, cloud IB)
  uint64_t guid = 0;           // node GUID, host byte order
  std::vector<GidEntry> gids;  // populated (non-zero) entries only, as last read (read_gid_table)
  int gid_table_length = 0;    // gid_tbl_len: entries read_gid_table looks at
  std::string ibdev_path;      // sysfs directory of the device ("" for devices without one)
  std::string netdev;          // paired netdev: of the GID a RoCE connection uses, else topology's pairing
  int max_qp = 0, max_qp_wr = 0, max_sge = 0, max_cqe = 0;
  uint64_t max_msg_sz = 0;  // the largest single request the port carries (mlx5: 1 GiB); 0 when unknown
  int pkey_table_length = 0;
  bool dmabuf = false;            // ibv_reg_dmabuf_mr exists and the kernel accepts dma-bufs (probe)
  topology::Placement placement;  // from topology/ by device name; defaults when it does not know it
  std::vector<int> near_gpus;     // indices into the machine's GPUs at PIX/PXB distance
};

// A port's rate from its speed bits (active_speed_ex where nonzero, else active_speed) and
// active_width bits; 0 when either is unknown. 4x XDR: 800000.
int port_speed_mbps(uint32_t speed, uint32_t width);
// The same from a queried port (active_speed_ex where the rdma-core headers built against have it).
int port_speed_mbps(const ibv_port_attr& attr);

// Every InfiniBand and RoCE port of every device the library lists, active or not (sieve-info shows
// them all). Error only when the library cannot list devices at all; a device that fails to open,
// and devices and ports of other kinds (iWARP, EFA, usNIC: no RC queue pairs Sieve can connect), are
// skipped with a note in *notes.
Status discover_ports(const VerbsLibrary& verbs, const topology::Machine& machine, std::vector<IbPort>* out,
                      std::vector<std::string>* notes);

// Reads the populated entries of port `port`'s GID table into out->gids (replacing them): through
// _ibv_query_gid_ex where the library has it, else ibv_query_gid and sysfs for the RoCE type.
void read_gid_table(const VerbsLibrary& verbs, ibv_context* context, const std::string& ibdev_path, int port,
                    int table_length, IbPort* out);

// SIEVE_IB_HCA, NCCL_IB_HCA's syntax: "mlx5_0:1,mlx5_1" (prefixes; ":port" narrows to one port),
// "=mlx5_0" (exact names), "^mlx5_2" (exclude). Empty selects every active port.
struct HcaSpec {
  bool exclude = false;
  bool exact = false;
  struct Entry {
    std::string name;
    int port = -1;  // -1: every port
  };
  std::vector<Entry> entries;
};
Status parse_hca_spec(const std::string& text, HcaSpec* out);  // error names the bad entry
bool hca_matches(const HcaSpec& spec, const IbPort& port);

// The active ports the spec selects, in discovery order.
std::vector<IbPort> select_ports(const std::vector<IbPort>& ports, const HcaSpec& spec);

// select_gid (ib_gid.h) with only an index configured (SIEVE_IB_GID_INDEX, -1 for none).
Status choose_gid(const IbPort& port, int configured, int* index);

}  // namespace sieve::net::ib
