#!/bin/sh
# Fails if any C++ source of the project is not formatted as .clang-format says.
clang_format=$1
root=$2
cd "$root" || exit 1
files=$(git ls-files '*.h' '*.cc' 2>/dev/null || find src tools tests bench include -name '*.h' -o -name '*.cc')
[ -n "$files" ] || exit 0
# shellcheck disable=SC2086
"$clang_format" --dry-run -Werror $files
