#!/usr/bin/env bash
# Checks that the C/C++ lines a change adds or modifies follow .clang-format (part of scripts/test.sh).
# Only changed lines are checked (clang-format-diff), so older code that predates .clang-format never fails a
# change that did not touch it. What "the change" is:
#   - FLOPMETER_FORMAT_BASE=<rev> when set (e.g. origin/main in CI);
#   - else the merge-base with the first of main, origin/main that exists, when HEAD is not on it;
#   - else the last commit (HEAD~1..HEAD): a fresh CI clone of main checks the commit it was started for;
#   - no history to compare with (a single-commit or shallow clone): nothing to check, exit 0 with a note.
# Uncommitted changes to tracked files are included. Exit 1 and print the fixes when a line is off;
# `clang-format -i FILE` applies them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

format_diff=""
for candidate in clang-format-diff clang-format-diff-14; do
  if command -v "$candidate" >/dev/null; then format_diff="$candidate"; break; fi
done
if [ -z "$format_diff" ] || ! command -v clang-format >/dev/null; then
  echo "check_format: clang-format / clang-format-diff not found (Debian: clang-format); skipped" >&2
  exit 0
fi
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "check_format: not a git checkout; skipped"
  exit 0
fi

base="${FLOPMETER_FORMAT_BASE:-}"
if [ -z "$base" ]; then
  head="$(git rev-parse HEAD)"
  for branch in main origin/main; do
    if git rev-parse --verify -q "$branch^{commit}" >/dev/null; then
      merge_base="$(git merge-base HEAD "$branch" 2>/dev/null || true)"
      if [ -n "$merge_base" ] && [ "$merge_base" != "$head" ]; then base="$merge_base"; fi
      break
    fi
  done
fi
if [ -z "$base" ]; then
  if git rev-parse --verify -q HEAD~1 >/dev/null; then
    base="HEAD~1"
  else
    echo "check_format: no earlier commit to compare with (a single-commit or shallow clone); skipped"
    exit 0
  fi
fi

files=$(git diff --name-only --diff-filter=ACMR "$base" -- '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' | grep -v '^tests/fuzz_corpus/' || true)
if [ -z "$files" ]; then
  echo "check_format: no C/C++ file changed since $(git rev-parse --short "$base")"
  exit 0
fi
# shellcheck disable=SC2086
fixes="$(git diff -U0 --no-color "$base" -- $files | "$format_diff" -p1 -style=file)"
if [ -n "$fixes" ]; then
  echo "$fixes"
  echo "check_format: the changed lines above do not follow .clang-format (since $(git rev-parse --short "$base"))" >&2
  exit 1
fi
echo "check_format: $(echo "$files" | wc -l) changed C/C++ file(s) follow .clang-format"
