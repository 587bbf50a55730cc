#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds NCCL's own socket transport (src/transport/net_socket.cc, NCCL 2.28) from an NCCL source
# tree the caller provides into OUT_DIR/libnccl-net-ncclsocket-src.so, an ext-net plugin exporting
# ncclNetPlugin_v11, for `sieve-perf --compare`. Unlike libnccl-net-ncclsocket.so (which forwards
# to the installed libnccl and needs a CUDA driver), this one runs on a GPU-less host: the CUDA and
# NCCL-internal symbols the transport reaches for come from nccl_socket_stubs.cc beside this script.
# Nothing is fetched and nothing of NCCL is written into this repository: the tree is only read,
# and every output (the generated nccl.h, objects, the plugin) goes to OUT_DIR.
#
#   tools/sieve-perf/build-nccl-socket-plugin.sh NCCL_SRC_DIR OUT_DIR
#
# Environment: CXX (default g++), CUDA_HOME (default /usr/local/cuda; only its headers are used).
set -euo pipefail

usage() { echo "usage: $0 NCCL_SRC_DIR OUT_DIR   (NCCL_SRC_DIR: an NCCL 2.28 source tree, e.g. v2.28.9-1)" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
NCCL_SRC=$1
OUT=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CXX=${CXX:-g++}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

# The NCCL files compiled as they are: the transport, its socket layer, parameter loading, and
# utils.cc for the interface-list matching that NCCL_SOCKET_IFNAME uses.
NCCL_FILES=(src/transport/net_socket.cc src/misc/socket.cc src/misc/param.cc src/misc/utils.cc)

for f in src/nccl.h.in makefiles/version.mk "${NCCL_FILES[@]}"; do
  [[ -f "$NCCL_SRC/$f" ]] || { echo "$0: NCCL_SRC_DIR $NCCL_SRC: missing $f (not an NCCL 2.28 source tree?)" >&2; exit 1; }
done
[[ -f "$CUDA_HOME/include/cuda_runtime.h" ]] ||
  { echo "$0: CUDA_HOME $CUDA_HOME: missing include/cuda_runtime.h (set CUDA_HOME to a CUDA toolkit)" >&2; exit 1; }

mkdir -p "$OUT/include" "$OUT/obj"

# nccl.h from nccl.h.in, as NCCL's src/Makefile generates it: version numbers from version.mk.
version_field() { sed -n "s/^$1[[:space:]]*:=[[:space:]]*//p" "$NCCL_SRC/makefiles/version.mk" | tr -d '[:space:]'; }
MAJOR=$(version_field NCCL_MAJOR); MINOR=$(version_field NCCL_MINOR)
PATCH=$(version_field NCCL_PATCH); SUFFIX=$(version_field NCCL_SUFFIX)
[[ -n $MAJOR && -n $MINOR && -n $PATCH ]] ||
  { echo "$0: $NCCL_SRC/makefiles/version.mk: no NCCL_MAJOR/NCCL_MINOR/NCCL_PATCH" >&2; exit 1; }
[[ $MAJOR.$MINOR == 2.28 ]] ||
  echo "$0: warning: NCCL $MAJOR.$MINOR.$PATCH; written for 2.28 (its ncclNet_t is the v11 table)" >&2
VERSION=$(printf "%d%02d%02d" "$MAJOR" "$MINOR" "$PATCH")
sed -e "s/\${nccl:Major}/$MAJOR/g" -e "s/\${nccl:Minor}/$MINOR/g" -e "s/\${nccl:Patch}/$PATCH/g" \
    -e "s/\${nccl:Suffix}/$SUFFIX/g" -e "s/\${nccl:Version}/$VERSION/g" \
    "$NCCL_SRC/src/nccl.h.in" > "$OUT/include/nccl.h"

# cccl/ holds libcu++ (<cuda/atomic>), which NCCL's headers include on the host side too.
CXXFLAGS=(-std=c++17 -O2 -g -fPIC -fvisibility=hidden -pthread
          -I"$OUT/include" -I"$NCCL_SRC/src/include" -I"$NCCL_SRC/src/include/plugin"
          -I"$CUDA_HOME/include" -I"$CUDA_HOME/include/cccl")

OBJS=()
for f in "${NCCL_FILES[@]}" "$HERE/nccl_socket_stubs.cc"; do
  src=$f; [[ $f == /* ]] || src=$NCCL_SRC/$f
  obj=$OUT/obj/$(basename "${f%.cc}").o
  echo "compiling $src"
  "$CXX" "${CXXFLAGS[@]}" -c "$src" -o "$obj"
  OBJS+=("$obj")
done

# --no-undefined: a symbol the stubs miss fails here, not at dlopen inside sieve-perf.
"$CXX" -shared -pthread -Wl,--no-undefined -o "$OUT/libnccl-net-ncclsocket-src.so" "${OBJS[@]}"
nm -D --defined-only "$OUT/libnccl-net-ncclsocket-src.so" | grep -q ' ncclNetPlugin_v11$' ||
  { echo "$0: $OUT/libnccl-net-ncclsocket-src.so does not export ncclNetPlugin_v11" >&2; exit 1; }
echo "built $OUT/libnccl-net-ncclsocket-src.so (NCCL $MAJOR.$MINOR.$PATCH socket transport, ncclNetPlugin_v11)"
