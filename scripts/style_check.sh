#!/usr/bin/env bash
# Style of what changed since .style-base (a commit hash): every changed C++
# line follows .clang-format (clang-format 14), and every commit subject is at
# most 72 characters (docs/contributing.md "Commits"). Older code and history
# are left as they are. Exit 0 clean, 1 a violation (the diff or the subjects
# are printed), 77 when it cannot judge (no git history, no clang-format).
#
#   scripts/style_check.sh            from anywhere in a clone
#   scripts/style_check.sh --fix      reformat the changed lines in the work tree
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(tr -d '[:space:]' < .style-base)
cf=$(command -v clang-format-14 || command -v clang-format || true)
gcf=$(command -v git-clang-format-14 || command -v git-clang-format || true)
if [ -z "$cf" ] || [ -z "$gcf" ]; then echo "style: SKIP: clang-format (14) not found"; exit 77; fi
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null 2>&1; then
  echo "style: SKIP: no git history with the base commit $base (a shallow clone or an export)"; exit 77
fi
exts=c,h,cpp,hpp,cu,cuh
if [ "${1:-}" = "--fix" ]; then
  "$gcf" --binary "$cf" --style file --extensions "$exts" --force "$base"; exit 0
fi
status=0
# Committed changes since the base, then uncommitted ones.
out=$("$gcf" --binary "$cf" --style file --extensions "$exts" --diff "$base" HEAD 2>&1 || true)
case "$out" in
  *"no modified files"*|*"did not modify any files"*|"") ;;
  *) echo "$out"; echo "style: FAIL: the lines above, changed since $base, do not follow .clang-format" \
       "(scripts/style_check.sh --fix reformats them)"; status=1 ;;
esac
long=$(git log --no-merges --format='%h %s' "$base..HEAD" | awk '{ s = substr($0, index($0, " ") + 1); if (length(s) > 72) print }')
if [ -n "$long" ]; then
  echo "$long"; echo "style: FAIL: commit subjects above are over 72 characters (put the detail in the body)"; status=1
fi
[ $status -eq 0 ] && echo "style: PASS: changed lines and commit subjects since $(git log -1 --format='%h %ad' --date=short "$base")"
exit $status
