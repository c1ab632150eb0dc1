#!/usr/bin/env bash
# Runs the comparison beside the peers and the library's own delivery and
# middleware benchmarks, COUNT times each (default 6) for BENCHTIME each
# (go test's -benchtime, default 1s), and prints benchstat tables with every
# implementation beside the floor measured in the same run.
#
#	./internal/benchcmp/run.sh
#	OUT=results COUNT=10 ./internal/benchcmp/run.sh   # keep the raw results in results/
#	COUNT=1 BENCHTIME=1x ./internal/benchcmp/run.sh   # one iteration of each: does it run (TestREADME_RunSh)
set -euo pipefail
cd "$(dirname "$0")"
count=${COUNT:-6}
benchtime=${BENCHTIME:-1s}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

echo "machine: $(go env GOOS)/$(go env GOARCH), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(go version | cut -d' ' -f3)"
echo "count: $count; benchtime: $benchtime; raw results in $out"
go test -run '^$' -bench . -benchtime "$benchtime" -count "$count" . > "$out/peers.txt"
(cd ../.. && go test -run '^$' -bench 'SendInMemory|Middleware|Deliver/conc=.*/impl=(raw|raw-bounded|retryablehttp|retryablehttp-bounded|sender|.*-in-turns-with-raw-bounded)$|NewConnections' -benchtime "$benchtime" -count "$count" .) > "$out/library.txt"

echo
echo "== verification and signing beside the floor (impl=floor) and the peers"
go tool benchstat -col /impl "$out/peers.txt"
echo
echo "== the Sender's own cost, the middleware's, deliveries over the wire and new connections"
go tool benchstat -col /impl "$out/library.txt"
