#!/usr/bin/env bash
# The project's test command: the README shows it and .ci/run runs it.
# Long sweeps are off by default; see the README for KDB_LONG and friends.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed on: $unformatted" >&2
  exit 1
fi
go vet ./...
go test -race -tags kdb_invariants -timeout 15m ./...
