# SPDX-License-Identifier: Apache-2.0
"""The constants of Sieve's C API, as plugin/sieve.h defines them (test_sieve.py's
HeaderConstants checks every one against the header, so a change there fails a test, not a job)."""

# sieve.h error codes (SIEVE_ERR_*) and dtypes (SIEVE_DTYPE_*)
_ERR_INVALID, _ERR_UNSUPPORTED, _ERR_RANGE, _ERR_NOT_FOUND = -1, -2, -3, -4
_ERR_INTERNAL, _ERR_UNAVAILABLE = -8, -9
_DTYPE_F32, _DTYPE_F16, _DTYPE_BF16, _DTYPE_F64, _DTYPE_I8, _DTYPE_U8, _DTYPE_I32, _DTYPE_I64 = range(8)
_COMMIT_UNION = 1
# sieve.h: masks that name a collective instead of a buffer (FSDP's fresh buffers)
_COLLECTIVES = {"reduce_scatter": 1, "all_gather": 2}
_COMMIT_REFUSED, _COMMIT_ACTIVATED, _COMMIT_PENDING = 0, 1, 2
# The commit token (sieve.h): SIEVE_COMMIT_TOKEN_WORDS int64 values holding the "no proxy" vote, which
# makes every rank refuse when no proxy intercepts the all-reduce (INT64_MIN, but word 4).
_TOKEN_WORDS, _TOKEN_NO_PROXY = 6, 3
_INT64_MIN = -(1 << 63)
# sieve_capabilities() bits (SIEVE_CAP_*)
_CAP_CUDA_COMPACT, _CAP_HOST_COMPACT, _CAP_PROXY, _CAP_VERBS = 1, 2, 4, 8
