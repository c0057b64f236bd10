#!/bin/sh
# Layers depend one way only: core -> xport -> prov -> tools.
#
#   check_layering.sh <source root> [<xport archive>... -- <core archive>...]
#
# Includes: a file may include headers of its own layer and of layers before it, never of a later
# one; and prov reaches xport through its seam, xport/transport.h, only.
# Links (with archives given): every symbol the transport's archives leave undefined must be
# defined by them, by the core's archives, or by the C/C++ runtime (libc, libm, libstdc++,
# libgcc_s, and a sanitizer's runtime in sanitizer builds). A call from xport into the provider,
# or into libfabric, is a back-edge the compiler cannot see in an include line; this sees it.
root=${1:-.}
[ $# -gt 0 ] && shift
fail=0
check() {  # check <dir> <forbidden include prefixes...>
  dir=$1; shift
  [ -d "$root/$dir" ] || return 0
  for p in "$@"; do
    if grep -rnE "#include +\"$p/" "$root/$dir"; then
      echo "layering: $dir must not include $p/" >&2
      fail=1
    fi
  done
}
check src/core xport prov tools
check src/xport prov tools
check src/prov tools
if grep -rnE '#include +"xport/' "$root/src/prov" | grep -vE '#include +"xport/transport\.h"'; then
  echo "layering: src/prov includes xport/ only through xport/transport.h" >&2
  fail=1
fi

if [ $# -gt 0 ]; then
  xport=""
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do xport="$xport $1"; shift; done
  [ "$1" = "--" ] && shift
  core="$*"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # shellcheck disable=SC2086
  nm --undefined-only $xport 2>/dev/null | awk '$1 == "U" {print $2}' | sort -u >"$tmp/undefined"
  # shellcheck disable=SC2086
  nm --defined-only $xport $core 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u >"$tmp/defined"
  runtime=""
  for lib in libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1; do
    path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64|x86_64|64bit|AArch64/ {print $NF; exit}')
    [ -n "$path" ] || path=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
    runtime="$runtime $path"
  done
  # shellcheck disable=SC2086
  nm -D --defined-only $runtime 2>/dev/null | awk 'NF >= 3 {sub(/@.*/, "", $3); print $3}' |
    sort -u >>"$tmp/defined"
  sort -u -o "$tmp/defined" "$tmp/defined"
  # Left: neither the transport's, nor the core's, nor the runtime's. Sanitizer hooks and the
  # linker's own symbols are the toolchain's.
  comm -23 "$tmp/undefined" "$tmp/defined" |
    grep -vE '^(__asan|__ubsan|__tsan|__sanitizer|__lsan|_GLOBAL_OFFSET_TABLE_|__dso_handle|_ITM_|__gmon_start__|__cxa_|__gxx_personality|_Unwind_|__once_proxy|__tls_get_addr|_ZTVN10__cxxabiv1|_ZTIN10__cxxabiv1)' \
      >"$tmp/left"
  if [ -s "$tmp/left" ]; then
    echo "layering: the transport's archives use symbols outside core and the C/C++ runtime:" >&2
    c++filt <"$tmp/left" | sed 's/^/  /' >&2
    fail=1
  fi
fi
exit $fail
