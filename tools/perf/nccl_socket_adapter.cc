// NCCL's own socket transport as an ext-net plugin, for `sieve-perf --compare`: the ncclNet_t that
// libnccl.so.2 carries inside (ncclNetSocket, a local symbol of NCCL 2.27-2.28, whose ncclNet_t is
// the v11 table) exported as ncclNetPlugin_v11, so the same driver runs both transports in one run.
// Nothing of NCCL is copied: the symbol's address is read from the installed library's own symbol
// table (libnccl ships unstripped) and every entry forwards to NCCL's code.
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "plugin/abi/net_v11.h"

namespace {

using namespace sieve::abi;

// Offset of a named object in an ELF file's .symtab (0 when absent).
uint64_t symtab_value(const char* path, const char* name) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  uint64_t value = 0;
  if (::fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    void* map = ::mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map != MAP_FAILED) {
      const auto* base = static_cast<const unsigned char*>(map);
      const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
      const bool elf64 = std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64;
      const uint64_t sections_end = elf64 ? eh->e_shoff + uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr) : 0;
      if (elf64 && sections_end <= static_cast<uint64_t>(st.st_size)) {
        const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
        for (int i = 0; i < eh->e_shnum && !value; ++i) {
          if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
          const Elf64_Shdr& strings = sh[sh[i].sh_link];
          if (sh[i].sh_offset + sh[i].sh_size > static_cast<uint64_t>(st.st_size) ||
              strings.sh_offset + strings.sh_size > static_cast<uint64_t>(st.st_size))
            continue;
          const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
          const char* names = reinterpret_cast<const char*>(base + strings.sh_offset);
          for (uint64_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
            if (ELF64_ST_TYPE(syms[k].st_info) != STT_OBJECT || syms[k].st_name >= strings.sh_size) continue;
            if (std::strcmp(names + syms[k].st_name, name) == 0) {
              value = syms[k].st_value;
              break;
            }
          }
        }
      }
      ::munmap(map, st.st_size);
    }
  }
  ::close(fd);
  return value;
}

const ncclNet_v11_t* nccl_socket() {
  static std::once_flag once;
  static const ncclNet_v11_t* table = nullptr;
  std::call_once(once, [] {
    const char* path = SIEVE_COMPARE_LIBNCCL;
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    link_map* map = nullptr;
    const uint64_t offset = symtab_value(path, "ncclNetSocket");
    if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !offset) {
      std::fprintf(stderr, "nccl-socket adapter: cannot find ncclNetSocket in %s (%s)\n", path,
                   handle ? "no such symbol: a stripped or other NCCL" : dlerror());
      return;
    }
    table = reinterpret_cast<const ncclNet_v11_t*>(map->l_addr + offset);
  });
  return table;
}

#define FORWARD(fn, ...)                        \
  const ncclNet_v11_t* t = nccl_socket();       \
  if (!t) return ncclInternalError;             \
  return t->fn(__VA_ARGS__)

ncclResult_t init(void** ctx, uint64_t id, ncclNetCommConfig_v11_t* c, ncclDebugLogger_t l, ncclProfilerCallback_t p) {
  FORWARD(init, ctx, id, c, l, p);
}
ncclResult_t devices(int* n) { FORWARD(devices, n); }
ncclResult_t properties(int d, ncclNetProperties_v11_t* p) { FORWARD(getProperties, d, p); }
ncclResult_t listen(void* ctx, int d, void* h, void** l) { FORWARD(listen, ctx, d, h, l); }
ncclResult_t connect(void* ctx, int d, void* h, void** s, ncclNetDeviceHandle_v7_t** dc) {
  FORWARD(connect, ctx, d, h, s, dc);
}
ncclResult_t accept(void* l, void** r, ncclNetDeviceHandle_v7_t** dc) { FORWARD(accept, l, r, dc); }
ncclResult_t reg_mr(void* c, void* d, size_t s, int t2, void** m) { FORWARD(regMr, c, d, s, t2, m); }
ncclResult_t reg_mr_dmabuf(void* c, void* d, size_t s, int t2, uint64_t o, int fd, void** m) {
  FORWARD(regMrDmaBuf, c, d, s, t2, o, fd, m);
}
ncclResult_t dereg_mr(void* c, void* m) { FORWARD(deregMr, c, m); }
ncclResult_t isend(void* c, void* d, size_t s, int tag, void* m, void* ph, void** r) {
  FORWARD(isend, c, d, s, tag, m, ph, r);
}
ncclResult_t irecv(void* c, int n, void** d, size_t* s, int* tags, void** m, void** ph, void** r) {
  FORWARD(irecv, c, n, d, s, tags, m, ph, r);
}
ncclResult_t iflush(void* c, int n, void** d, int* s, void** m, void** r) { FORWARD(iflush, c, n, d, s, m, r); }
ncclResult_t test(void* r, int* done, int* sizes) { FORWARD(test, r, done, sizes); }
ncclResult_t close_send(void* c) { FORWARD(closeSend, c); }
ncclResult_t close_recv(void* c) { FORWARD(closeRecv, c); }
ncclResult_t close_listen(void* c) { FORWARD(closeListen, c); }
ncclResult_t finalize(void* ctx) { FORWARD(finalize, ctx); }
ncclResult_t set_net_attr(void* ctx, ncclNetAttr_v11_t* a) {
  const ncclNet_v11_t* t = nccl_socket();
  if (!t) return ncclInternalError;
  return t->setNetAttr ? t->setNetAttr(ctx, a) : ncclSuccess;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    "NCCL-Socket", init,   devices,    properties,   listen,       connect, accept,  reg_mr,
    reg_mr_dmabuf, dereg_mr, isend,     irecv,        iflush,       test,    close_send,
    close_recv,    close_listen, nullptr, nullptr,    nullptr,      finalize, set_net_attr,
};
