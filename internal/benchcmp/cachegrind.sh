#!/bin/sh
# cachegrind.sh counts what one iteration of a benchmark costs outside Go's
# runtime, with valgrind's cachegrind: instructions, first-level
# instruction-cache misses and first-level data-cache read misses. Those
# counts do not drift with the machine's load, as times do; the runtime's
# are left out because its scheduler spins under valgrind.
#
# It runs the benchmark at N1 and N2 iterations and divides the difference
# of the counts by N2-N1, so that set-up cancels out. Run it from the
# directory of the module that has the benchmark, with valgrind installed
# (Debian's package valgrind):
#
#	./internal/benchcmp/cachegrind.sh 'Deliver/conc=1/impl=sender$' [N1 N2]
set -eu
bench=$1
n1=${2:-2000}
n2=${3:-6000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/bench.test" .
for n in "$n1" "$n2"; do
	# cpu.all=off keeps Go from the instructions valgrind cannot run.
	GODEBUG=asyncpreemptoff=1,cpu.all=off valgrind --tool=cachegrind --cache-sim=yes \
		--cachegrind-out-file="$tmp/out.$n" "$tmp/bench.test" -test.run '^$' \
		-test.bench "$bench" -test.benchtime "${n}x" >"$tmp/log.$n" 2>&1 || true
	if ! grep -q '^Benchmark.* ns/op' "$tmp/log.$n" || grep -q -- '--- FAIL' "$tmp/log.$n"; then
		echo "cachegrind.sh: the run of $n iterations printed no result; run it again" >&2
		exit 1
	fi
	cg_annotate --auto=no --threshold=0 --show=Ir,I1mr,D1mr --show-percs=no "$tmp/out.$n" |
		awk '$4 ~ /:/ && $4 !~ /\/src\/runtime\// && $4 !~ /\/src\/internal\/runtime\// {
			for (i = 1; i <= 3; i++) { v = $i; gsub(/,/, "", v); if (v == ".") v = 0; s[i] += v }
		} END { printf "%.0f %.0f %.0f\n", s[1], s[2], s[3] }' >"$tmp/sum.$n"
done
read -r a1 b1 c1 <"$tmp/sum.$n1"
read -r a2 b2 c2 <"$tmp/sum.$n2"
awk -v n="$((n2 - n1))" -v a="$((a2 - a1))" -v b="$((b2 - b1))" -v c="$((c2 - c1))" -v bench="$bench" 'BEGIN {
	printf "%s, per iteration outside the runtime: %.0f instructions, %.0f I1 misses, %.0f D1 read misses\n", bench, a / n, b / n, c / n
}'
