#!/usr/bin/env bash
# Makes every nested module require the root module at COMMIT (default HEAD),
# a commit already on main or about to land with them, and updates their
# go.sum. Run from the repository root after committing the root's change:
#
#	bash .ci/bump-root.sh            # the root as of HEAD
#	bash .ci/bump-root.sh 1a2b3c4d   # as of another commit
#
# See CONTRIBUTING.md for when.
set -euo pipefail
commit=$(git rev-parse "${1:-HEAD}")
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
d="$work/proxy/github.com/signedhook/webhook/@v"
mkdir -p "$d"

# serve COMMIT: adds the root module at COMMIT to the proxy, as its
# pseudo-version, and prints that version.
serve() {
	local c=$1 ts v
	ts=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S "$c")
	v="v0.0.0-$ts-${c:0:12}"
	[ -e "$d/$v.zip" ] && { echo "$v"; return; }
	echo "$v" >>"$d/list"
	printf '{"Version":"%s","Time":"%s"}\n' "$v" "$(TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ "$c")" >"$d/$v.info"
	git show "$c:go.mod" >"$d/$v.mod"
	local exclude=()
	for nested in $(git ls-tree -r --name-only "$c" | grep '/go.mod$' | xargs -r -n1 dirname); do
		exclude+=(":(exclude)$nested")
	done
	git archive --format=zip --prefix="github.com/signedhook/webhook@$v/" -o "$d/$v.zip" "$c" -- . "${exclude[@]}"
	echo "$v"
}
ver=$(serve "$commit")
# The versions required now are served too: the go command reads their
# go.mod before it moves on, and no public proxy has them.
for req in $(git ls-files '*/go.mod' | xargs awk '$1 == "github.com/signedhook/webhook" { print $2 }' | sort -u); do
	serve "$(git rev-parse "${req##*-}")" >/dev/null
done
for m in $(git ls-files '*/go.mod' | xargs -n1 dirname); do
	(cd "$m" && GOWORK=off GOFLAGS=-mod=mod GONOSUMDB=github.com/signedhook \
		GOPROXY="file://$work/proxy,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" \
		go get "github.com/signedhook/webhook@$ver" && GOWORK=off GOFLAGS=-mod=mod GONOSUMDB=github.com/signedhook \
		GOPROXY="file://$work/proxy,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" go mod tidy)
	echo "$m: github.com/signedhook/webhook $ver"
done
sed -i "s|^replace github.com/signedhook/webhook v[^ ]* => ./\$|replace github.com/signedhook/webhook $ver => ./|" go.work
grep -q "^replace github.com/signedhook/webhook $ver => ./\$" go.work
echo "go.work: replace github.com/signedhook/webhook $ver => ./"
