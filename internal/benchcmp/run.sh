#!/usr/bin/env bash
# Runs the comparison beside the peers and the library's own delivery and
# middleware benchmarks, COUNT times each (default 6), and prints benchstat
# tables with every implementation beside the floor measured in the same run.
#
#	./internal/benchcmp/run.sh
#	OUT=results COUNT=10 ./internal/benchcmp/run.sh   # keep the raw results in results/
set -euo pipefail
cd "$(dirname "$0")"
count=${COUNT:-6}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

echo "machine: $(go env GOOS)/$(go env GOARCH), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(go version | cut -d' ' -f3)"
echo "count: $count; raw results in $out"
go test -run '^$' -bench . -count "$count" . > "$out/peers.txt"
(cd ../.. && go test -run '^$' -bench 'SendInMemory|Middleware|Deliver/conc=.*/impl=(raw|retryablehttp|retryablehttp-bounded|sender)$|NewConnections' -count "$count" .) > "$out/library.txt"

echo
echo "== verification and signing beside the floor (impl=floor) and the peers"
go tool benchstat -col /impl "$out/peers.txt"
echo
echo "== the Sender's own cost, the middleware's, deliveries over the wire and new connections"
go tool benchstat -col /impl "$out/library.txt"
