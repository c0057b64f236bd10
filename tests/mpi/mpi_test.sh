#!/bin/sh
# Runs an MPI program through Debian's Open MPI on fabq, and checks that fabq carried it:
#   mpi_test.sh local <ranks> <program> [args...]
#       all ranks on this host (fabq's shared-memory path between them)
#   mpi_test.sh hosts <ranks> <program> [args...]
#       the ranks spread over 3 network namespaces joined by a bridge, each its own host with
#       its own address (fabq's TCP path); as root, else it says so and exits 77 (skipped)
#
# The flags are the ones README's "Running MPI on fabq" gives: Debian's
# /etc/openmpi/openmpi-mca-params.conf turns the ofi MTL off (mtl = ^ofi), so `--mca pml cm
# --mca mtl ofi` turn it back on, FI_PROVIDER_PATH finds the provider and FI_PROVIDER=fabq keeps
# libfabric's own providers out. mtl_ofi_verbose makes every rank print the provider its MTL
# selected: the run passes only if each rank says "fabq" and the program prints its OK line.
#
# FI_PROVIDER_PATH must name the directory of the libfabq-fi.so under test. The program's
# output must match the extended regular expression FABQ_MPI_EXPECT (default: tests/mpi/
# mpi_check.c's OK line) and must not match FABQ_MPI_REJECT (default: nothing); FABQ_MPI_ARGS
# adds mpirun options (split at blanks). Exit status: 0
# passed, 77 skipped, anything else failed (the output says what).
set -eu

mode=$1
ranks=$2
shift 2
: "${FI_PROVIDER_PATH:?set FI_PROVIDER_PATH to the directory of libfabq-fi.so}"
# The run's own limit, below ctest's: a hang fails with Open MPI's output, not a bare timeout.
limit=${FABQ_MPI_TIMEOUT:-100}
expect=${FABQ_MPI_EXPECT:-': OK \('}
reject=${FABQ_MPI_REJECT:-}

if ! command -v mpirun >/dev/null 2>&1; then
  echo "mpi_test: mpirun not found (scripts/setup installs openmpi-bin)"
  exit 77
fi

out=$(mktemp)
ns_prefix="fqm$$"
cleanup() {
  rm -f "$out"
  if [ "$mode" = hosts ]; then
    for n in 1 2 3; do ip netns del "$ns_prefix-$n" 2>/dev/null || true; done
    ip netns del "$ns_prefix-br" 2>/dev/null || true
    rm -f "${agent:-}"
    [ -z "${tmpbase:-}" ] || rm -rf "$tmpbase"
  fi
}
trap cleanup EXIT INT TERM

# A sanitizer-built provider needs its runtime in the (uninstrumented) MPI program.
preload=""
for lib in $(ldd "$FI_PROVIDER_PATH/libfabq-fi.so" | awk '/lib(a|t)san\.so/ {print $3}'); do
  preload=$lib
done

# shellcheck disable=SC2086
set -- --allow-run-as-root --oversubscribe --bind-to none \
  --mca pml cm --mca mtl ofi --mca mtl_ofi_verbose 1 \
  -x FI_PROVIDER_PATH -x FI_PROVIDER=fabq ${FABQ_MPI_ARGS:-} "$@"
if [ -n "$preload" ]; then
  set -- -x "LD_PRELOAD=$preload" -x "ASAN_OPTIONS=detect_leaks=0:${ASAN_OPTIONS:-}" \
    -x "TSAN_OPTIONS=report_signal_unsafe=0:${TSAN_OPTIONS:-}" "$@"
fi

case $mode in
  local)
    status=0
    timeout -k 5 "$limit" mpirun -np "$ranks" "$@" >"$out" 2>&1 || status=$?
    ;;
  hosts)
    if [ "$(id -u)" -ne 0 ] || ! ip netns add "$ns_prefix-br" 2>/dev/null; then
      echo "mpi_test: SKIPPED: the 3-namespace run needs root (ip netns)"
      exit 77
    fi
    # hosts 10.77.0.1-3 on a bridge in a namespace of its own; lo up in each. Ranks go round
    # the hosts (--map-by node): 4 ranks are 2 + 1 + 1.
    ip -n "$ns_prefix-br" link add br0 type bridge
    ip -n "$ns_prefix-br" link set br0 up
    hostlist=""
    per=$(((ranks + 2) / 3))
    for n in 1 2 3; do
      ns="$ns_prefix-$n"
      ip netns add "$ns"
      ip link add "fqm$$v$n" netns "$ns_prefix-br" type veth peer name eth0 netns "$ns"
      ip -n "$ns_prefix-br" link set "fqm$$v$n" master br0 up
      ip -n "$ns" addr add "10.77.0.$n/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
      hostlist="${hostlist:+$hostlist,}10.77.0.$n:$per"
    done
    # Open MPI reaches a "host" through its rsh agent: this one enters the namespace that owns
    # the address instead of logging in. Each host gets a temporary directory of its own, as
    # separate machines would: daemons that share one (all are named after this machine)
    # trip over each other's session files.
    agent=$(mktemp)
    tmpbase=$(mktemp -d)
    cat >"$agent" <<EOF
#!/bin/sh
host=\$1; shift
n=\${host##*.}
mkdir -p "$tmpbase/\$n"
exec ip netns exec "$ns_prefix-\$n" env TMPDIR="$tmpbase/\$n" sh -c "\$*"
EOF
    chmod +x "$agent"
    status=0
    mkdir -p "$tmpbase/1"
    TMPDIR="$tmpbase/1" timeout -k 5 "$limit" ip netns exec "$ns_prefix-1" mpirun -np "$ranks" --host "$hostlist" \
      --map-by node --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include 10.77.0.0/24 \
      "$@" >"$out" 2>&1 || status=$?
    ;;
  *)
    echo "mpi_test: unknown mode '$mode' (local or hosts)"
    exit 2
    ;;
esac

cat "$out"
selected=$(grep -c 'mtl:ofi:prov: fabq' "$out" || true)
other=$(grep 'mtl:ofi:prov:' "$out" | grep -vc 'prov: fabq' || true)
if [ "$status" -ne 0 ]; then
  echo "mpi_test: FAILED: mpirun exited $status"
  exit 1
fi
if [ "$selected" -ne "$ranks" ] || [ "$other" -ne 0 ]; then
  echo "mpi_test: FAILED: $selected of $ranks ranks selected fabq ($other another provider)"
  exit 1
fi
if ! grep -Eq "$expect" "$out"; then
  echo "mpi_test: FAILED: the program printed no line matching '$expect'"
  exit 1
fi
if [ -n "$reject" ] && grep -Eq "$reject" "$out"; then
  echo "mpi_test: FAILED: the program printed a line matching '$reject'"
  exit 1
fi
if [ "$mode" = hosts ] && [ "$ranks" -ge 3 ] && ! grep -q ': OK (.* 3 network namespaces)' "$out"; then
  echo "mpi_test: FAILED: the ranks did not run in 3 network namespaces"
  exit 1
fi
echo "mpi_test: passed: $ranks ranks on fabq ($mode)"
