#!/bin/sh
# Runs an MPI program through Debian's Open MPI on fabq, and checks that fabq carried it:
#   mpi_test.sh local <ranks> <program> [args...]
#       all ranks on this host (fabq's shared-memory path between them)
#   mpi_test.sh hosts <ranks> <program> [args...]
#       the ranks spread over 3 network namespaces (FABQ_MPI_HOSTS of them) joined by a bridge,
#       each its own host with its own address (fabq's TCP path); as root, else it says so and
#       exits 77 (skipped)
#
# The flags are the ones README's "Running MPI on fabq" gives: Debian's
# /etc/openmpi/openmpi-mca-params.conf turns the ofi MTL off (mtl = ^ofi), so `--mca pml cm
# --mca mtl ofi` turn it back on, FI_PROVIDER_PATH finds the provider and FI_PROVIDER=fabq keeps
# libfabric's own providers out. mtl_ofi_verbose makes every rank print the provider its MTL
# selected: the run passes only if each rank says "fabq" and the program prints its OK line.
#
# FABQ_MPI_ONESIDED=rdma also sends one-sided operations through fabq's RMA and atomics: Open
# MPI's osc/rdma component over the ofi BTL (btl/ofi), both of which Debian's configuration
# leaves out (btl = ^...,ofi; osc/rdma is only chosen for the BTLs it names):
#   --mca osc rdma            the only one-sided component, so none can take over silently
#   --mca osc_rdma_btls ofi   the BTL osc/rdma may use (its default names InfiniBand and UCX ones)
#   --mca btl self,ofi        btl/ofi, and no other BTL that reaches another rank: vader (shared
#                             memory) would do for ranks of one host and tcp could carry
#                             point to point; with neither, a window without btl/ofi on fabq
#                             fails to be created
#   --mca btl_base_verbose 10 each rank prints "init of component ofi returned success" once
#                             btl/ofi has opened its RMA endpoint, on fabq (FI_PROVIDER=fabq;
#                             without fabq it says "returned failure")
# The run passes only if every rank says so as well. Point to point stays on the ofi MTL.
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
onesided=${FABQ_MPI_ONESIDED:-}
hosts=${FABQ_MPI_HOSTS:-3}
case $onesided in
  '') onesided_args="" ;;
  rdma)
    onesided_args="--mca osc rdma --mca osc_rdma_btls ofi --mca btl self,ofi"
    onesided_args="$onesided_args --mca btl_base_verbose 10"
    ;;
  *)
    echo "mpi_test: unknown FABQ_MPI_ONESIDED '$onesided' (rdma or nothing)"
    exit 2
    ;;
esac

if ! command -v mpirun >/dev/null 2>&1; then
  echo "mpi_test: mpirun not found (scripts/setup installs openmpi-bin)"
  exit 77
fi

# netns_up, netns_exec, netns_hosts, netns_down: the 3 "hosts" of the hosts mode.
# shellcheck source-path=SCRIPTDIR source=netns.sh
. "$(cd "$(dirname "$0")" && pwd)/netns.sh"

out=$(mktemp)
cleanup() {
  rm -f "$out"
  netns_down
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
  -x FI_PROVIDER_PATH -x FI_PROVIDER=fabq $onesided_args ${FABQ_MPI_ARGS:-} "$@"
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
    # hosts 10.77.0.1-<hosts> on a bridge (tests/mpi/netns.sh). Ranks go round the hosts
    # (--map-by node): 4 ranks on 3 hosts are 2 + 1 + 1.
    ns_status=0
    netns_up "fqm$$" "$hosts" || ns_status=$?
    if [ "$ns_status" -eq 1 ]; then
      echo "mpi_test: SKIPPED: the $hosts-namespace run needs root (ip netns)"
      exit 77
    elif [ "$ns_status" -ne 0 ]; then
      echo "mpi_test: FAILED: could not set up the network namespaces"
      exit 1
    fi
    status=0
    netns_exec 1 timeout -k 5 "$limit" mpirun -np "$ranks" \
      --host "$(netns_hosts $(((ranks + hosts - 1) / hosts)))" \
      --map-by node --mca plm_rsh_agent "$netns_agent" --mca oob_tcp_if_include 10.77.0.0/24 \
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
btl_ofi=$(grep -c 'select: init of component ofi returned success' "$out" || true)
if [ "$onesided" = rdma ] && [ "$btl_ofi" -ne "$ranks" ]; then
  echo "mpi_test: FAILED: btl/ofi opened on fabq in $btl_ofi of $ranks ranks"
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
# mpi_check says how many namespaces its ranks were in (other programs do not).
if [ "$mode" = hosts ] && [ "$ranks" -ge 3 ] && [ -z "${FABQ_MPI_EXPECT:-}" ] &&
  ! grep -q ": OK (.* $hosts network namespaces)" "$out"; then
  echo "mpi_test: FAILED: the ranks did not run in $hosts network namespaces"
  exit 1
fi
echo "mpi_test: passed: $ranks ranks on fabq ($mode${onesided:+, one-sided: osc/$onesided, btl/ofi})"
