#!/usr/bin/env bash
# Checks that every C/C++ source of the project is formatted as .clang-format
# says (clang-format 14, Debian 12's clang-format package). third_party/ is
# not ours and is not checked.
#
#   tools/check_format.sh         exit 1 and list the files that differ
#   tools/check_format.sh --fix   reformat those files in place
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fix=0
case "${1:-}" in
  --fix) fix=1 ;;
  "") ;;
  *) echo "usage: tools/check_format.sh [--fix]" >&2; exit 2 ;;
esac

cf=$(command -v clang-format || true)
if [[ -z "$cf" ]]; then
  echo "check_format: clang-format not found (apt-get install clang-format)" >&2
  exit 2
fi

mapfile -t files < <(git ls-files -- '*.c' '*.h' '*.cc' '*.cu' ':!:third_party/**')
if ((fix)); then
  "$cf" -i --style=file -- "${files[@]}"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  if ! "$cf" --style=file --dry-run --Werror -- "$f" >/dev/null 2>&1; then
    bad+=("$f")
  fi
done
if ((${#bad[@]})); then
  echo "check_format: ${#bad[@]} file(s) not formatted as .clang-format says:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "run tools/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
