# SPDX-License-Identifier: Apache-2.0
"""The interposed NCCL entry points on a machine without a GPU: they must pass through to the real
NCCL when it is loaded, fail cleanly (ncclSystemError, a warning) when it is not, and never recurse
into themselves. One mode per process, because the real symbols are resolved once per process.
Usage: passthrough_check.py LIBRARY {no-nccl | nccl-first | preload} [LIBNCCL]
(no-nccl with LIBNCCL: loads it after the first calls, locally, as Python loads torch)"""

import ctypes
import sys

NCCL_SUCCESS, NCCL_UNHANDLED_CUDA_ERROR, NCCL_SYSTEM_ERROR, NCCL_INVALID_ARGUMENT = 0, 1, 2, 4
NCCL_FLOAT32, NCCL_INT32, NCCL_SUM = 7, 2, 0


def stats(lib):
    s = (ctypes.c_uint64 * 14)()
    s[0] = ctypes.sizeof(s)
    assert lib.sieve_stats_get(s) == 0
    return {"dense": s[7], "compacted": s[8]}


def expect(what, got, want):
    if got != want:
        print("FAIL: %s returned %d, expected %d" % (what, got, want))
        sys.exit(1)
    print("ok: %s -> %d" % (what, got))


def main():
    library, mode = sys.argv[1], sys.argv[2]
    if mode == "no-nccl":
        lib = ctypes.CDLL(library)
        expect("ncclGroupStart without libnccl", lib.ncclGroupStart(), NCCL_SYSTEM_ERROR)
        expect("ncclAllReduce without libnccl",
               lib.ncclAllReduce(None, None, ctypes.c_size_t(1 << 20), NCCL_FLOAT32, NCCL_SUM, None, None),
               NCCL_SYSTEM_ERROR)
        if len(sys.argv) > 3:  # NCCL loaded later (as torch does on first use): found then
            ctypes.CDLL(sys.argv[3], mode=ctypes.RTLD_LOCAL)
            expect("ncclGroupStart once libnccl is loaded", lib.ncclGroupStart(), NCCL_SUCCESS)
            expect("ncclGroupEnd once libnccl is loaded", lib.ncclGroupEnd(), NCCL_SUCCESS)
        return
    libnccl = sys.argv[3]
    if mode == "nccl-first":
        ctypes.CDLL(libnccl, mode=ctypes.RTLD_GLOBAL)  # NCCL earlier in the global scope than Sieve
        lib = ctypes.CDLL(library)
    else:  # preload: Sieve came first (LD_PRELOAD); NCCL loaded locally, as Python loads torch's
        ctypes.CDLL(libnccl, mode=ctypes.RTLD_LOCAL)
        lib = ctypes.CDLL(None)  # calls through the global scope: the interposer
    expect("ncclGroupStart", lib.ncclGroupStart(), NCCL_SUCCESS)
    expect("ncclGroupEnd", lib.ncclGroupEnd(), NCCL_SUCCESS)
    # NCCL refuses a null communicator: proof the call reached the real ncclAllReduce and came back.
    for dtype, count in ((NCCL_INT32, 1 << 20), (NCCL_FLOAT32, 16), (NCCL_FLOAT32, 1 << 20)):
        expect("ncclAllReduce(comm=NULL, dtype %d, count %d)" % (dtype, count),
               lib.ncclAllReduce(None, None, ctypes.c_size_t(count), dtype, NCCL_SUM, None, None),
               NCCL_INVALID_ARGUMENT)
    # The other interposed entry points reach the real NCCL too, the pncclAllReduce alias included.
    expect("ncclReduceScatter(comm=NULL)",
           lib.ncclReduceScatter(None, None, ctypes.c_size_t(1 << 20), NCCL_FLOAT32, NCCL_SUM, None, None),
           NCCL_INVALID_ARGUMENT)
    expect("ncclAllGather(comm=NULL)",
           lib.ncclAllGather(None, None, ctypes.c_size_t(1 << 20), NCCL_FLOAT32, None, None), NCCL_INVALID_ARGUMENT)
    expect("pncclAllReduce(comm=NULL)",
           lib.pncclAllReduce(None, None, ctypes.c_size_t(16), NCCL_FLOAT32, NCCL_SUM, None, None),
           NCCL_INVALID_ARGUMENT)
    # Creation (the proxy forgets whatever it knew at a new handle's address) and the error poll (the
    # proxy answers for a handle an abort has begun on) reach the real NCCL too.
    # (ncclCommSplit checks for a CUDA device before its arguments: without one it says so.)
    newcomm = ctypes.c_void_p(0)
    rc = lib.ncclCommSplit(None, 0, 0, ctypes.byref(newcomm), None)
    expect("ncclCommSplit(comm=NULL)", rc, rc if rc in (NCCL_UNHANDLED_CUDA_ERROR, NCCL_INVALID_ARGUMENT) else -1)
    state = ctypes.c_int(0)
    expect("ncclCommGetAsyncError(comm=NULL)", lib.ncclCommGetAsyncError(None, ctypes.byref(state)),
           NCCL_INVALID_ARGUMENT)
    sieve = ctypes.CDLL(library)
    base = stats(sieve)
    # With a mask published the proxy looks further, but without a CUDA device it must still end in
    # the real NCCL (dense), never crash.
    bits = (ctypes.c_uint8 * (1 << 17))()
    fake_buffer = ctypes.c_void_p(0x7f0000000000)
    assert sieve.sieve_mask_publish(fake_buffer, ctypes.c_size_t(1 << 20), 0, bits, None) == 0
    # A commit is a collective on a communicator: without one it is refused before anything is issued.
    assert sieve.sieve_comm_commit(None, None, 0, None) == -1
    expect("ncclAllReduce(comm=NULL) on a published buffer",
           lib.ncclAllReduce(fake_buffer, fake_buffer, ctypes.c_size_t(1 << 20), NCCL_FLOAT32, NCCL_SUM, None, None),
           NCCL_INVALID_ARGUMENT)
    counted = stats(sieve)
    # The published call was never committed on a communicator: it counts as dense at most (NCCL
    # refuses the NULL communicator first); it never compacts.
    if counted["dense"] - base["dense"] not in (0, 1) or counted["compacted"] != 0:
        print("FAIL: expected at most one more dense pass-through and none compacted, got %s after %s"
              % (counted, base))
        sys.exit(1)
    print("ok: counters %s" % counted)


if __name__ == "__main__":
    main()
