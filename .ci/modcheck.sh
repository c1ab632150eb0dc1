#!/usr/bin/env bash
# Shows that riverhook resolves for someone outside the repository: no
# go.work, no replace, only what a module proxy would serve. It builds a
# file:// module proxy from this repository's git history (the root module at
# the version riverhook/go.mod requires, riverhook at HEAD), then builds a
# throwaway module that imports riverhook. Any other module comes from the
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
serve github.com/signedhook/webhook . "$rcommit" "$req"
head=$(pseudo HEAD)
serve github.com/signedhook/webhook/riverhook riverhook HEAD "$head"

mkdir -p "$work/consumer"
cd "$work/consumer"
cat >main.go <<'GO'
package main

import (
	"fmt"

	"github.com/signedhook/webhook/riverhook"
)

func main() { fmt.Println(riverhook.Args{}.Kind()) }
GO
export GOWORK=off GOFLAGS=-mod=mod GONOSUMDB=github.com/signedhook GONOSUMCHECK=1 GOPRIVATE= \
	GOPROXY="file://$proxy,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" GOMODCACHE="$work/modcache"
go mod init example.com/consumer >/dev/null 2>&1
go get "github.com/signedhook/webhook/riverhook@$head" >/dev/null
go build -o /dev/null .
echo "modcheck: a module outside the repository builds riverhook $head with github.com/signedhook/webhook $req"
