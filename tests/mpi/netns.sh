# Sourced by tests/mpi/mpi_test.sh and scripts/bench-mpi: "hosts" for Open MPI as network
# namespaces on this machine (root only).
#
#   netns_up <prefix> <count>  namespaces <prefix>-1..<count>, host n with address 10.77.0.n/24
#                              on its eth0 and lo up, joined by a bridge in <prefix>-br (a
#                              namespace of its own); <prefix> at most 11 characters (it names
#                              the veth ends too). Returns 1, having created nothing, when
#                              namespaces cannot be made (not root), 2 when a step failed
#                              (netns_down removes what was made).
#   netns_exec <n> <cmd...>    runs cmd in host n's namespace with host n's TMPDIR
#   netns_hosts <slots>        prints Open MPI's --host list: 10.77.0.1:<slots>,...
#   netns_down                 removes the namespaces and files (safe to call at any time)
#
# Open MPI reaches a host through its rsh agent: $netns_agent enters the namespace that owns the
# address instead of logging in. Each host gets a temporary directory of its own ($netns_tmp/n),
# as separate machines would: daemons that share one (all are named after this machine) trip
# over each other's session files, and crash in hwloc's shared-memory topology code. mpirun
# itself runs in host 1 (netns_exec 1 mpirun ...) with `--mca plm_rsh_agent "$netns_agent"
# --mca oob_tcp_if_include 10.77.0.0/24`.

netns_prefix=""
netns_count=0
netns_agent=""
netns_tmp=""

netns_up() {
  if [ "$(id -u)" -ne 0 ] || ! ip netns add "$1-br" 2>/dev/null; then
    return 1
  fi
  netns_prefix=$1
  netns_count=$2
  ip -n "$netns_prefix-br" link add br0 type bridge || return 2
  ip -n "$netns_prefix-br" link set br0 up || return 2
  _n=1
  while [ "$_n" -le "$netns_count" ]; do
    ip netns add "$netns_prefix-$_n" || return 2
    ip link add "${netns_prefix}v$_n" netns "$netns_prefix-br" type veth peer name eth0 \
      netns "$netns_prefix-$_n" || return 2
    ip -n "$netns_prefix-br" link set "${netns_prefix}v$_n" master br0 up || return 2
    ip -n "$netns_prefix-$_n" addr add "10.77.0.$_n/24" dev eth0 || return 2
    ip -n "$netns_prefix-$_n" link set eth0 up || return 2
    ip -n "$netns_prefix-$_n" link set lo up || return 2
    _n=$((_n + 1))
  done
  netns_agent=$(mktemp) || return 2
  netns_tmp=$(mktemp -d) || return 2
  cat >"$netns_agent" <<AGENT || return 2
#!/bin/sh
host=\$1; shift
n=\${host##*.}
mkdir -p "$netns_tmp/\$n"
exec ip netns exec "$netns_prefix-\$n" env TMPDIR="$netns_tmp/\$n" sh -c "\$*"
AGENT
  chmod +x "$netns_agent" || return 2
}

netns_exec() {
  _n=$1
  shift
  mkdir -p "$netns_tmp/$_n"
  TMPDIR="$netns_tmp/$_n" ip netns exec "$netns_prefix-$_n" "$@"
}

netns_hosts() {
  _list=""
  _n=1
  while [ "$_n" -le "$netns_count" ]; do
    _list="${_list:+$_list,}10.77.0.$_n:$1"
    _n=$((_n + 1))
  done
  echo "$_list"
}

netns_down() {
  if [ -n "$netns_prefix" ]; then
    _n=1
    while [ "$_n" -le "$netns_count" ]; do
      ip netns del "$netns_prefix-$_n" 2>/dev/null || true
      _n=$((_n + 1))
    done
    ip netns del "$netns_prefix-br" 2>/dev/null || true
  fi
  [ -z "$netns_agent" ] || rm -f "$netns_agent"
  [ -z "$netns_tmp" ] || rm -rf "$netns_tmp"
  netns_prefix=""
  netns_count=0
  netns_agent=""
  netns_tmp=""
}
