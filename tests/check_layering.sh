#!/bin/sh
# Layers depend one way only: core -> prov -> xport -> tools. A file may include headers of its
# own layer and of layers before it, never of a later one.
root=${1:-.}
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
check src/core prov xport tools
check src/prov xport tools
check src/xport tools
exit $fail
