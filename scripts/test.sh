#!/usr/bin/env bash
# The project's test command: the README shows it and .ci/run runs it.
#  1. gofmt and go vet;
#  2. every test under the race detector and the kdb_invariants build tag,
#     with the long campaigns shortened (-short);
#  3. the root's crash campaigns, kill test and error sweep at their default
#     sizes without the race detector, printing their summary lines;
#  4. the other modules, each with its own go.mod (bench/peers,
#     integrations/mqtt, integrations/raft, and any later integrations/*):
#     go vet and their short tests.
# Longer sweeps: KDB_LONG=1 (see the README).
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed on: $unformatted" >&2
  exit 1
fi
go vet ./...
go test -race -tags kdb_invariants -short -timeout 20m ./...
echo "== crash campaign, kill test and error sweep at default size"
go test -tags kdb_invariants -count=1 -timeout 20m -v \
  -run 'TestDB_CrashCampaign|TestDB_ProcessCrashThenPowerLoss|TestKill_RandomMoments|TestErrSweep' . \
  | grep -E '^(--- |ok|FAIL|PASS)|crash-points=|kills=|points='
for mod in bench/peers integrations/*/; do
  [ -f "$mod/go.mod" ] || continue
  echo "== ${mod%/}"
  (cd "$mod" && go vet ./... && go test -short -count=1 -timeout 15m ./...)
done
