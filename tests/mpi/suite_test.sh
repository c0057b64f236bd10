#!/bin/sh
# Runs an MPI suite nobody here wrote on fabq, through tests/mpi/mpi_test.sh (which checks that
# every rank's MTL, or BTL, selected fabq):
#   suite_test.sh <local|hosts> <ranks> mpi4py [mpi4py_suite.py options]
#       mpi4py's own tests (scripts/mpi-suites mpi4py) against Debian's python3-mpi4py, module
#       by module; passes when rank 0 prints "mpi4py suite: OK". Cases are skipped only by name,
#       each with its reason, in tests/mpi/mpi4py.skip.
#   suite_test.sh <local|hosts> <ranks> IMB-MPI1|IMB-NBC|IMB-RMA|IMB-EXT [IMB options]
#       Intel MPI Benchmarks built with -DCHECK (scripts/mpi-suites imb-check): passes when every
#       rank reached MPI_Finalize, the output has at least one row with a "defects" column, and
#       every such row found 0 defects. A length IMB gave up on for its time limit ("time-out")
#       is said, and not counted as checked.
# Exit status 77 (skipped, saying why) when the suite's tarball or python3-mpi4py is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mode=$1
ranks=$2
suite=$3
shift 3

case $suite in
  mpi4py) kind=mpi4py ;;
  IMB-MPI1 | IMB-NBC | IMB-RMA | IMB-EXT) kind=imb-check ;;
  *)
    echo "suite_test: unknown suite '$suite'"
    exit 2
    ;;
esac
status=0
dir=$("$root/scripts/mpi-suites" "$kind") || status=$?
if [ "$status" -eq 3 ]; then
  echo "suite_test: SKIPPED: the $kind tarball is not in ../shared/vendor"
  exit 77
elif [ "$status" -ne 0 ]; then
  echo "suite_test: FAILED: scripts/mpi-suites $kind exited $status"
  exit 1
fi

if [ "$kind" = mpi4py ]; then
  # Debian's interpreter, the one python3-mpi4py is installed for (not whichever python3 is
  # first on PATH).
  if ! /usr/bin/python3 -c 'import mpi4py' 2>/dev/null; then
    echo "suite_test: SKIPPED: /usr/bin/python3 has no mpi4py (scripts/setup installs python3-mpi4py)"
    exit 77
  fi
  FABQ_MPI_EXPECT='^mpi4py suite: OK' exec "$here/mpi_test.sh" "$mode" "$ranks" \
    /usr/bin/python3 "$here/mpi4py_suite.py" "$dir" --skip "$here/mpi4py.skip" "$@"
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
FABQ_MPI_EXPECT='All processes entering MPI_Finalize' \
  "$here/mpi_test.sh" "$mode" "$ranks" "$dir/$suite" "$@" >"$out" 2>&1 || status=$?
cat "$out"
[ "$status" -eq 0 ] || exit "$status"
# A table's header names its columns; with -DCHECK the last is "defects", and each row's last
# field is the defects that row found.
awk '
  /^[[:space:]]*#/ { defects = ($NF == "defects"); next }
  defects && $1 ~ /^[0-9]+$/ && /time-out/ { print "suite_test: not run (time limit): " $0; next }
  defects && $1 ~ /^[0-9]+$/ { rows++; if ($NF + 0 != 0) { bad++; print "suite_test: defects: " $0 } }
  END {
    if (rows == 0) { print "suite_test: FAILED: no row with a defects column (not built with -DCHECK?)"; exit 1 }
    if (bad > 0) { print "suite_test: FAILED: " bad " of " rows " rows found defects"; exit 1 }
    print "suite_test: passed: " rows " rows checked, no defects"
  }' "$out"
