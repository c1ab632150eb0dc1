#!/usr/bin/env bash
# Shows that each nested module a user imports (riverhook, otelhook) resolves
# for someone outside the repository: no go.work, no replace, only what a
# module proxy would serve. It builds a file:// module proxy from this
# repository's git history (the root module at the version each one's go.mod
# requires, the nested modules at HEAD), then builds, for each, a throwaway
# module that imports it, and runs the nested module's own tests that need no
# database (TEST_DATABASE_URL unset) against that root: .ci/run runs them all
# against the root in the tree (go.work), the newest. A build alone would
# miss a root whose behaviour changed under an unchanged API (the rules
# riverhook/internal/human copies, say). Any other module comes from the
# usual proxy. Run from the repository root; used by .ci/run.
set -euo pipefail
root=$(pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
proxy="$work/proxy"

# pseudo COMMIT: the pseudo-version of a commit, as the go command names it.
pseudo() {
	local c ts
	c=$(git rev-parse "$1")
	ts=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S "$c")
	echo "v0.0.0-$ts-${c:0:12}"
}

# serve MODULE DIR COMMIT VERSION: adds the module at DIR (. for the root) of
# COMMIT to the proxy, as VERSION; the root's zip leaves out the nested modules.
serve() {
	local mod=$1 dir=$2 commit=$3 ver=$4 d="$proxy/$1/@v" tree=$3
	if [ -e "$d/$ver.zip" ]; then
		return # served already, for another nested module
	fi
	mkdir -p "$d"
	echo "$ver" >>"$d/list"
	printf '{"Version":"%s","Time":"%s"}\n' "$ver" "$(TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ "$commit")" >"$d/$ver.info"
	local exclude=()
	if [ "$dir" = . ]; then
		for nested in $(git ls-tree -r --name-only "$commit" | grep '/go.mod$' | xargs -r -n1 dirname); do
			exclude+=(":(exclude)$nested")
		done
	else
		tree="$commit:$dir"
	fi
	git show "$commit:${dir#.}${dir:+/}go.mod" 2>/dev/null >"$d/$ver.mod" || git show "$commit:go.mod" >"$d/$ver.mod"
	git archive --format=zip --prefix="$mod@$ver/" -o "$d/$ver.zip" "$tree" -- . "${exclude[@]}"
}

req=$(awk '$1 == "github.com/signedhook/webhook" { print $2 }' riverhook/go.mod)
rcommit=${req##*-}
if ! git cat-file -e "$rcommit^{commit}" 2>/dev/null; then
	echo "modcheck: riverhook/go.mod requires github.com/signedhook/webhook $req, a commit this repository does not have"
	exit 1
fi
for m in $(git ls-files '*/go.mod' | xargs -n1 dirname); do
	if ! grep -q "^	github.com/signedhook/webhook $req\$" "$m/go.mod"; then
		echo "modcheck: $m/go.mod does not require github.com/signedhook/webhook $req as riverhook does (run .ci/bump-root.sh)"
		exit 1
	fi
done
# Without go.work's replace of that version, a fresh clone's go command would
# fetch its go.mod from the public proxy, which does not have it.
if ! grep -q "^replace github.com/signedhook/webhook $req => ./\$" go.work; then
	echo "modcheck: go.work does not replace github.com/signedhook/webhook $req with ./ (run .ci/bump-root.sh)"
	exit 1
fi
export GOWORK=off GOFLAGS=-mod=mod GONOSUMDB=github.com/signedhook GONOSUMCHECK=1 GOPRIVATE= \
	GOPROXY="file://$proxy,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" GOMODCACHE="$work/modcache"
head=$(pseudo HEAD)

# check DIR EXPR: serves the nested module at DIR and the root version its
# go.mod requires, then builds a module outside the tree whose main prints
# EXPR, an expression using the package DIR.
check() {
	local dir=$1 expr=$2 mod="github.com/signedhook/webhook/$1" req rcommit
	req=$(awk '$1 == "github.com/signedhook/webhook" { print $2 }' "$root/$dir/go.mod")
	rcommit=${req##*-}
	if ! git -C "$root" cat-file -e "$rcommit^{commit}" 2>/dev/null; then
		echo "modcheck: $dir/go.mod requires github.com/signedhook/webhook $req, a commit this repository does not have"
		exit 1
	fi
	(cd "$root" && serve github.com/signedhook/webhook . "$rcommit" "$req" && serve "$mod" "$dir" HEAD "$head")
	mkdir -p "$work/consumer-$dir"
	cd "$work/consumer-$dir"
	cat >main.go <<GO
package main

import (
	"fmt"

	"$mod"
)

func main() { fmt.Println($expr) }
GO
	go mod init example.com/consumer >/dev/null 2>&1
	go get "$mod@$head" >/dev/null
	go build -o /dev/null .
	echo "modcheck: a module outside the repository builds $dir $head with github.com/signedhook/webhook $req"
	mkdir -p "$work/src-$dir"
	git -C "$root" archive HEAD:"$dir" | tar -x -C "$work/src-$dir"
	cd "$work/src-$dir"
	if ! out=$(env -u TEST_DATABASE_URL -u CI go test ./... 2>&1); then
		echo "$out" | tail -40
		echo "modcheck: $dir $head fails its tests with github.com/signedhook/webhook $req, the version its go.mod requires (run .ci/bump-root.sh if it needs a later one)"
		exit 1
	fi
	echo "modcheck: $dir $head passes its tests that need no database with github.com/signedhook/webhook $req"
}

check riverhook 'riverhook.Args{}.Kind()'
check otelhook 'otelhook.ScopeName'
