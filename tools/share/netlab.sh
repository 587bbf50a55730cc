#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netlab: several "nodes" on one machine, each in its own network namespace, joined by a virtual
# switch, optionally shaped. Used alone, by the conformance tests, by sieve-perf and sieve-bench.
#
#   netlab.sh [--prefix P] up N [--rate 1gbit] [--delay 1ms [--jitter 0.5ms]] [--loss 1%] [--reorder 25%]
#                               [--seed S] [--impair PATH] [--p2p] [--owner PID]
#   netlab.sh [--prefix P] down [--all]      --all: every lab netlab.sh has built (all prefixes)
#   netlab.sh [--prefix P] exec I cmd...     run cmd inside node I (0-based)
#   netlab.sh [--prefix P] addr I            node I's IPv4 address (10.77.0.(I+1))
#   netlab.sh [--prefix P] ns I              node I's namespace name
#   netlab.sh [--prefix P] ifname            the nodes' interface name (eth0)
#   netlab.sh [--prefix P] status [--all]    namespaces, addresses and qdiscs of the lab (exit 1 when it
#                                            is not up); --all: every lab with its owner, "orphaned"
#                                            when the owner has died
#   netlab.sh [--prefix P] impair-stats I    node I's sieve-impair counters (when it runs one)
#   netlab.sh --version | --help
#
# Node I lives in namespace P-nI with interface eth0 = 10.77.0.(I+1)/24. By default every node is
# wired by a veth pair to a bridge that lives in its own namespace P-sw, so nothing touches the host's
# network; --p2p (N = 2 only) joins the two nodes by one veth pair instead. Shaping applies to each
# node's egress: tbf for --rate, netem (under the tbf) for --delay/--jitter/--loss/--reorder. Kernels
# without sch_netem get the same impairments from sieve-impair (installed beside the tools), one per node, fed by an
# iptables NFQUEUE rule on the node's eth0 egress (--queue-bypass: traffic flows if it dies); found by
# --impair, $NETLAB_IMPAIR, beside an installed netlab.sh (PREFIX/bin), PATH, or the source tree's
# build*/ folders; NETLAB_IMPAIRER=nfqueue forces it where netem exists. Every lab's record (its owner, sieve-impair pids and counters) lives in
# /run/sieve-netlab/P ($NETLAB_STATE_DIR). `up` first removes a lab of the same prefix (so it is
# idempotent) and every lab whose --owner process has died (a caller killed with SIGKILL cannot run
# its own `down`), and removes what it built if any step fails; `down` never fails. Values are
# checked before anything is built. Use a unique --prefix per caller (default "sieve", or
# $NETLAB_PREFIX) so parallel runs do not collide. Needs root and iproute2 (and iptables for
# sieve-impair).
set -euo pipefail

prefix=${NETLAB_PREFIX:-sieve}
ifname=eth0
seed=1          # sieve-impair's seed; node I uses seed + I
impair_path=""

die() { echo "netlab: $*" >&2; exit 2; }
usage_text() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
usage() { usage_text >&2; exit 2; }
# Written into the installed copy by CMake (tools/sieve-bench/CMakeLists.txt); empty in the source tree.
installed_version=""
# The installed version, else that of the source tree this script belongs to (CMake's project VERSION).
version() {
  local cmake
  [[ -n $installed_version ]] && { echo "$installed_version"; return; }
  cmake=$(dirname "$(readlink -f "$0")")/../../CMakeLists.txt
  sed -n 's/^project(sieve VERSION \([0-9.]*\).*/\1/p' "$cmake" 2>/dev/null | head -n 1 | grep . || echo unknown
}

# Leading global options.
while [[ $# -gt 0 && $1 == --prefix ]]; do
  [[ $# -ge 2 ]] || die "--prefix needs a value"
  prefix=$2; shift 2
done
[[ $# -ge 1 ]] || usage
command=$1; shift
case $command in
  -h|--help|help) usage_text; exit 0 ;;
  --version) echo "netlab.sh $(version)"; exit 0 ;;
esac
[[ $prefix =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || die "--prefix: bad prefix '$prefix' (letters, digits, _ . - ; at most 40)"

node_ns() { echo "${prefix}-n$1"; }
switch_ns() { echo "${prefix}-sw"; }
node_addr() { echo "10.77.0.$(( $1 + 1 ))"; }
state_root() { echo "${NETLAB_STATE_DIR:-/run/sieve-netlab}"; }
state_dir() { echo "$(state_root)/$prefix"; }

# tc's time and percentage syntax with the unit written out (tc reads a bare number as
# microseconds, sieve-impair as milliseconds).
check_time() {  # option value
  [[ $2 =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || die "$1 '$2': a duration with its unit, like 1ms or 250us"
}
check_percent() {  # option value
  [[ $2 =~ ^[0-9]+(\.[0-9]+)?%$ ]] && awk -v v="${2%\%}" 'BEGIN { exit !(v <= 100) }' ||
    die "$1 '$2': a percentage from 0% to 100%, like 1% or 0.5%"
}
time_us() {  # value in tc syntax -> integer microseconds
  [[ $1 =~ ^([0-9]+(\.[0-9]+)?)(us|ms|s)$ ]]
  local scale=1
  case ${BASH_REMATCH[3]} in ms) scale=1000 ;; s) scale=1000000 ;; esac
  awk -v v="${BASH_REMATCH[1]}" -v s=$scale 'BEGIN { printf "%d", v * s }'
}

# The lab's owner: "pid starttime" (the start time tells a reused pid from the owner).
process_start() { awk '{ print $22 }' "/proc/$1/stat" 2>/dev/null; }
owner_alive() {  # owner file
  local pid start
  read -r pid start <"$1" 2>/dev/null || return 0  # unreadable: leave the lab alone
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  [[ -d /proc/$pid && $(process_start "$pid") == "$start" ]] || return 1
  [[ $(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) != Z ]]  # killed, not yet reaped
}

check_index() {
  [[ $1 =~ ^[0-9]+$ ]] || die "node index must be a number, got '$1'"
  ip netns list | awk '{print $1}' | grep -qx "$(node_ns "$1")" || die "no node $1 in lab '$prefix' (run: $0 --prefix $prefix up N)"
}

# Bytes per second of a tc rate such as 1gbit, 500mbit, 10Gbit, 100kbit, 1000000bit.
rate_bytes_per_sec() {
  local text=${1,,} number unit
  [[ $text =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "bad --rate '$1' (e.g. 1gbit, 500mbit)"
  number=${BASH_REMATCH[1]}; unit=${BASH_REMATCH[2]}
  case $unit in
    bit) echo $(( number / 8 )) ;;
    kbit) echo $(( number * 1000 / 8 )) ;;
    mbit) echo $(( number * 1000000 / 8 )) ;;
    gbit) echo $(( number * 1000000000 / 8 )) ;;
  esac
}

lab_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix//./\\.}-(n[0-9]+|sw)$" || true
}

# Asks every sieve-impair of the lab to release its held packets and print its counters, then makes sure.
stop_impairers() {
  local dir pidfile pid waited
  dir=$(state_dir)
  [[ -d $dir ]] || return 0
  for pidfile in "$dir"/impair-n*.pid; do
    [[ -f $pidfile ]] || continue
    pid=$(<"$pidfile")
    # Only a process that is still our sieve-impair (pids get reused).
    if [[ $pid =~ ^[0-9]+$ ]] && grep -qa sieve-impair "/proc/$pid/cmdline" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      waited=0
      while kill -0 "$pid" 2>/dev/null && (( ++waited < 30 )); do sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$dir"
}

cmd_down() {
  local ns
  stop_impairers
  for ns in $(lab_namespaces); do
    # Deleting a namespace destroys its veth ends, and with them the peers in other namespaces.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$(state_dir)"
}

# Every lab with a record, as prefixes.
recorded_labs() {
  local dir
  for dir in "$(state_root)"/*/; do
    [[ -d $dir ]] && basename "$dir"
  done
}

# Runs cmd_down for another prefix (prefix is global).
down_lab() {
  local saved=$prefix
  prefix=$1
  cmd_down
  prefix=$saved
}

# Labs whose owner died (SIGKILL, OOM, a test timeout) cannot have run their own `down`.
remove_orphans() {
  local lab
  for lab in $(recorded_labs); do
    [[ $lab == "$prefix" ]] && continue
    if [[ -f $(state_root)/$lab/owner ]] && ! owner_alive "$(state_root)/$lab/owner"; then
      echo "netlab: removing lab '$lab': its owner (pid $(cut -d' ' -f1 <"$(state_root)/$lab/owner")) has died" >&2
      down_lab "$lab"
    fi
  done
}

# A TCP connect to a closed port answered "refused" proves the path works (no ping needed).
reachable() {  # ns addr
  local answer
  answer=$(ip netns exec "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1 || true)
  [[ $answer == *refused* || -z $answer ]]
}

# sieve-impair: the --impair option, $NETLAB_IMPAIR, the installation this script belongs to
# (PREFIX/share/sieve/netlab.sh beside PREFIX/bin/sieve-impair), PATH, then the newest build of this
# source tree. Prints nothing when there is none (the caller says so); never fails.
find_impairer() {
  local candidate here name=sieve-impair
  here=$(dirname "$(readlink -f "$0")")
  for candidate in "$impair_path" "${NETLAB_IMPAIR:-}" "$here/../../bin/$name" \
                   "$(command -v "$name" 2>/dev/null || true)"; do
    [[ -n $candidate && -x $candidate ]] && { echo "$candidate"; return 0; }
  done
  { ls -t "$here"/../../build*/tools/sieve-impair/sieve-impair 2>/dev/null || true; } | head -n 1
}

# True when this kernel has sch_netem (probed on a namespace's loopback, which nobody else uses).
have_netem() {  # ns
  [[ ${NETLAB_IMPAIRER:-auto} != nfqueue ]] || return 1
  ip netns exec "$1" tc qdisc add dev lo root netem delay 0ms 2>/dev/null || return 1
  ip netns exec "$1" tc qdisc del dev lo root
}

# netem's job done in user space: an NFQUEUE rule on eth0's egress feeding one sieve-impair.
start_impairer() {  # node ns delay jitter loss reorder
  local node=$1 ns=$2 delay=$3 jitter=$4 loss=$5 reorder=$6 impairer dir args=()
  impairer=$(find_impairer)
  [[ -n $impairer ]] || die "impairment unavailable: no netem qdisc in this kernel and no sieve-impair (build tools/sieve-impair, needs libnetfilter-queue-dev; or pass --impair PATH)"
  command -v iptables >/dev/null || die "impairment unavailable: no netem qdisc in this kernel and no iptables for sieve-impair's NFQUEUE"
  ip netns exec "$ns" iptables -w 5 -A OUTPUT -o $ifname -j NFQUEUE --queue-num 0 --queue-bypass 2>/dev/null ||
    die "impairment unavailable: no netem qdisc in this kernel and iptables has no NFQUEUE target here"
  [[ -n $delay ]] && args+=(--delay "$delay")
  [[ -n $jitter ]] && args+=(--jitter "$jitter")
  [[ -n $loss ]] && args+=(--loss "$loss")
  [[ -n $reorder ]] && args+=(--reorder "$reorder")
  dir=$(state_dir)
  mkdir -p "$dir"
  ip netns exec "$ns" "$impairer" --queue 0 --seed $(( seed + node )) --stats "$dir/impair-n$node.stats" "${args[@]}" \
    </dev/null >>"$dir/impair-n$node.log" 2>&1 &
  echo $! >"$dir/impair-n$node.pid"
  # Traffic is impaired only once the queue is bound (the stats file appears then).
  local waited=0
  until [[ -f $dir/impair-n$node.stats ]]; do
    if ! kill -0 "$(<"$dir/impair-n$node.pid")" 2>/dev/null || (( ++waited > 50 )); then
      die "sieve-impair did not start on node $node: $(tail -n 3 "$dir/impair-n$node.log" 2>/dev/null)"
    fi
    sleep 0.1
  done
}

shape_node() {  # node ns rate delay jitter loss reorder
  local node=$1 ns=$2 rate=$3 delay=$4 jitter=$5 loss=$6 reorder=$7 netem=()
  if [[ -n $delay ]]; then
    netem+=(delay "$delay")
    [[ -n $jitter ]] && netem+=("$jitter")
  fi
  [[ -n $jitter && -z $delay ]] && die "--jitter needs --delay"
  [[ -n $loss ]] && netem+=(loss "$loss")
  if [[ -n $reorder ]]; then
    [[ -n $delay ]] || die "--reorder needs --delay (netem reorders by delaying the other packets)"
    netem+=(reorder "$reorder")
  fi
  local parent=(root)
  if ((${#netem[@]})); then
    if have_netem "$ns"; then
      ip netns exec "$ns" tc qdisc add dev $ifname root handle 1: netem limit 100000 "${netem[@]}"
      parent=(parent 1:1)
    else
      # NFQUEUE sits in the IP output path, before any qdisc: the tbf below stays the root.
      start_impairer "$node" "$ns" "$delay" "$jitter" "$loss" "$reorder"
    fi
  fi
  if [[ -n $rate ]]; then
    local bps burst
    bps=$(rate_bytes_per_sec "$rate")
    # A veth hands tbf 64 KiB GSO packets, so the bucket must hold several of them: 4 ms of traffic,
    # at least 256 KiB.
    burst=$(( bps / 250 ))
    (( burst < 262144 )) && burst=262144
    ip netns exec "$ns" tc qdisc add dev $ifname "${parent[@]}" handle 10: tbf rate "$rate" burst "$burst" latency 50ms
  fi
}

cmd_up() {
  [[ $# -ge 1 && $1 =~ ^[0-9]+$ ]] || die "up needs a node count"
  local n=$1; shift
  (( n >= 1 && n <= 200 )) || die "node count must be 1..200"
  local rate="" delay="" jitter="" loss="" reorder="" p2p=0 owner=""
  while [[ $# -gt 0 ]]; do
    case $1 in
      --owner) owner=${2:?--owner needs a pid}; shift 2 ;;
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --delay) delay=${2:?--delay needs a value}; shift 2 ;;
      --jitter) jitter=${2:?--jitter needs a value}; shift 2 ;;
      --seed) seed=${2:?--seed needs a value}; shift 2 ;;
      --impair) impair_path=${2:?--impair needs a path}; shift 2 ;;
      --loss) loss=${2:?--loss needs a value}; shift 2 ;;
      --reorder) reorder=${2:?--reorder needs a value}; shift 2 ;;
      --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
      --p2p) p2p=1; shift ;;
      *) die "unknown option '$1' for up" ;;
    esac
  done
  # Every value is checked before anything is built.
  [[ -n $rate ]] && { rate_bytes_per_sec "$rate" >/dev/null || exit 2; }
  [[ -n $delay ]] && check_time --delay "$delay"
  [[ -n $jitter ]] && check_time --jitter "$jitter"
  [[ -n $loss ]] && check_percent --loss "$loss"
  [[ -n $reorder ]] && check_percent --reorder "$reorder"
  [[ -n $jitter && -z $delay ]] && die "--jitter needs --delay"
  [[ -n $jitter ]] && (( $(time_us "$jitter") > $(time_us "$delay") )) && die "--jitter $jitter exceeds --delay $delay"
  [[ -n $reorder && -z $delay ]] && die "--reorder needs --delay (netem reorders by delaying the other packets)"
  (( p2p == 0 || n == 2 )) || die "--p2p joins exactly 2 nodes"
  [[ $seed =~ ^[0-9]{1,15}$ ]] || die "--seed must be a number"
  local owner_record=""
  if [[ -n $owner ]]; then
    [[ $owner =~ ^[0-9]+$ && -d /proc/$owner ]] || die "--owner '$owner': no such process"
    owner_record="$owner $(process_start "$owner")"
  fi
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
  command -v ip >/dev/null || die "needs iproute2 (ip)"

  cmd_down
  remove_orphans
  mkdir -p "$(state_dir)"
  [[ -n $owner_record ]] && echo "$owner_record" >"$(state_dir)/owner"
  # Any failure from here on (a failing command or a die) removes what was built.
  trap 'echo "netlab: up failed, removing lab $prefix" >&2; cmd_down' EXIT
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$(node_ns $i)
    ip netns add "$ns"
    ip -n "$ns" link set lo up
  done
  if (( p2p )); then
    ip -n "$(node_ns 0)" link add $ifname type veth peer name $ifname netns "$(node_ns 1)"
  else
    local sw
    sw=$(switch_ns)
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    for ((i = 0; i < n; i++)); do
      ip -n "$(node_ns $i)" link add $ifname type veth peer name "p$i" netns "$sw"
      ip -n "$sw" link set "p$i" master br0
      ip -n "$sw" link set "p$i" up
    done
  fi
  for ((i = 0; i < n; i++)); do
    ns=$(node_ns $i)
    ip -n "$ns" addr add "$(node_addr $i)/24" dev $ifname
    ip -n "$ns" link set $ifname up
    if [[ -n $rate$delay$jitter$loss$reorder ]]; then
      shape_node "$i" "$ns" "$rate" "$delay" "$jitter" "$loss" "$reorder"
    fi
  done
  # The kernel reports carrier changes lazily (linkwatch, up to a second): wait until every node's
  # interface is operationally up, since programs (Sieve among them) skip interfaces that are down.
  for ((i = 0; i < n; i++)); do
    local waited=0
    until [[ $(ip netns exec "$(node_ns $i)" cat /sys/class/net/$ifname/operstate) == up ]]; do
      (( ++waited < 50 )) || { echo "netlab: node $i's $ifname never came up" >&2; false; }
      sleep 0.1
    done
  done
  # Wait until node 0 reaches every other node (bounded) so callers can start traffic at once.
  for ((i = 1; i < n; i++)); do
    local tries=0
    until reachable "$(node_ns 0)" "$(node_addr $i)"; do
      (( ++tries < 50 )) || { echo "netlab: node $i unreachable from node 0" >&2; false; }
      sleep 0.1
    done
  done
  trap - EXIT
  local impaired_by=""
  compgen -G "$(state_dir)/impair-n*.pid" >/dev/null && impaired_by=" (sieve-impair over NFQUEUE: no netem here)"
  echo "netlab: lab '$prefix' up: $n nodes${rate:+, rate $rate}${delay:+, delay $delay}${jitter:+ ± $jitter}${loss:+, loss $loss}${reorder:+, reorder $reorder}$impaired_by"
}

case $command in
  up) cmd_up "$@" ;;
  down)
    all=0
    while [[ $# -gt 0 ]]; do
      case $1 in
        --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
        --all) all=1; shift ;;
        *) die "unknown option '$1' for down" ;;
      esac
    done
    if (( all )); then
      for lab in $(recorded_labs); do down_lab "$lab"; done
    else
      cmd_down
    fi ;;
  exec)
    [[ $# -ge 2 ]] || die "exec needs a node index and a command"
    check_index "$1"
    ns=$(node_ns "$1"); shift
    exec ip netns exec "$ns" "$@" ;;
  addr) [[ $# -eq 1 ]] || die "addr needs a node index"; check_index "$1"; node_addr "$1" ;;
  ns) [[ $# -eq 1 ]] || die "ns needs a node index"; check_index "$1"; node_ns "$1" ;;
  ifname) echo $ifname ;;
  status)
    if [[ ${1:-} == --all ]]; then
      for lab in $(recorded_labs); do
        owner_file=$(state_root)/$lab/owner
        if [[ ! -f $owner_file ]]; then state="no owner recorded"
        elif owner_alive "$owner_file"; then state="owner pid $(cut -d' ' -f1 <"$owner_file") running"
        else state="orphaned: owner pid $(cut -d' ' -f1 <"$owner_file") has died (netlab.sh down --all removes it)"
        fi
        echo "$lab: $(prefix=$lab; lab_namespaces | wc -l) namespaces, $state"
      done
      exit 0
    fi
    [[ $# -eq 0 ]] || die "unknown option '$1' for status"
    namespaces=$(lab_namespaces)
    if [[ -z $namespaces ]]; then
      echo "netlab: no lab '$prefix' is up ($0 status --all lists the labs)"
      exit 1
    fi
    for ns in $namespaces; do
      echo "== $ns"
      ip -n "$ns" -br addr
      ip netns exec "$ns" tc qdisc show | grep -v -E "noqueue|pfifo_fast|^$" || true
    done
    for stats in "$(state_dir)"/impair-n*.stats; do
      [[ -f $stats ]] || continue
      echo "== $(basename "$stats" .stats): $(tr '\n' ' ' <"$stats")"
    done ;;
  impair-stats)
    [[ $# -eq 1 ]] || die "impair-stats needs a node index"
    check_index "$1"
    [[ -f $(state_dir)/impair-n$1.stats ]] || die "node $1 of lab '$prefix' runs no sieve-impair"
    cat "$(state_dir)/impair-n$1.stats" ;;
  *) die "unknown command '$command' (up, down, exec, addr, ns, ifname, status, impair-stats)" ;;
esac
