// SPDX-License-Identifier: Apache-2.0
/* A stand-in for the NVIDIA driver's libcuda.so.1 with one fake GPU, for testing the GPU kit's
 * run.sh on a machine without a GPU: it answers exactly the calls sieve-gpu-probe makes (driver
 * version, one device, its name, compute capability, memory, PCI id) and nothing else, so every
 * real CUDA program fails at once against it (the CUDA runtime finds no cuGetProcAddress), which is
 * what the kit's steps must survive. FAKE_CUDA_DRIVER_VERSION (e.g. 12080) makes it an older driver. */
#include <stdlib.h>
#include <string.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

FAKE_EXPORT int cuInit(unsigned flags) {
  (void)flags;
  return 0;
}
FAKE_EXPORT int cuDriverGetVersion(int* version) {
  const char* forced = getenv("FAKE_CUDA_DRIVER_VERSION");
  *version = forced ? atoi(forced) : 13000;
  return 0;
}
FAKE_EXPORT int cuDeviceGetCount(int* count) {
  *count = 1;
  return 0;
}
FAKE_EXPORT int cuDeviceGet(int* device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? 0 : 101;
}

FAKE_EXPORT int cuDeviceGetName(char* name, int length, int device) {
  (void)device;
  strncpy(name, "Fake GPU of the kit's tests", (size_t)length);
  return 0;
}

FAKE_EXPORT int cuDeviceGetAttribute(int* value, int attribute, int device) {
  (void)device;
  *value = attribute == 75 ? 9 : 0; /* 75: compute capability major, 76: minor */
  return 0;
}

FAKE_EXPORT int cuDeviceTotalMem_v2(unsigned long* bytes, int device) {
  (void)device;
  *bytes = 80ul << 30;
  return 0;
}

FAKE_EXPORT int cuDeviceGetPCIBusId(char* id, int length, int device) {
  (void)device;
  strncpy(id, "0000:00:00.0", (size_t)length);
  return 0;
}
