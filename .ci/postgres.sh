# Sourced by .ci/run: sets TEST_DATABASE_URL for riverhook's tests.
#
# A TEST_DATABASE_URL already set is used as it is; else a server answering
# on 127.0.0.1:5432; else a throwaway cluster made here with initdb and
# pg_ctl (installed from Debian's packages when absent) on a spare 127.0.0.1
# port, stopped and removed by pg_cleanup, which the caller runs on exit.

pg_dir=""
pg_bin=""

pg_cleanup() {
	if [ -n "$pg_dir" ]; then
		pg_as_owner "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate stop > /dev/null 2>&1 || true
		rm -rf "$pg_dir"
		pg_dir=""
	fi
}

# pg_as_owner runs a command as the postgres user when this is root:
# initdb refuses to run as root.
pg_as_owner() {
	if [ "$(id -u)" = 0 ]; then
		su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
	else
		"$@"
	fi
}

pg_port_free() { ! (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }

pg_start() {
	if [ -n "${TEST_DATABASE_URL:-}" ]; then
		echo "using TEST_DATABASE_URL as set"
		return
	fi
	if ! pg_port_free 5432; then
		export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
		echo "using the server on 127.0.0.1:5432"
		return
	fi
	pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2> /dev/null | sort -V | tail -n 1)
	if [ -z "$pg_bin" ]; then
		echo "installing PostgreSQL from Debian's packages"
		apt-get update -qq > /dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql > /dev/null
		pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	fi
	local port
	for port in $(seq 25432 25532); do
		pg_port_free "$port" && break
	done
	pg_dir=$(mktemp -d)
	chmod 755 "$pg_dir"
	mkdir "$pg_dir/data" "$pg_dir/run"
	[ "$(id -u)" = 0 ] && chown postgres "$pg_dir/data" "$pg_dir/run"
	pg_as_owner "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U postgres --no-sync > "$pg_dir/initdb.log" 2>&1 ||
		{ cat "$pg_dir/initdb.log"; return 1; }
	pg_as_owner "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/run/log" -w \
		-o "-h 127.0.0.1 -p $port -k $pg_dir/run -c fsync=off -c max_connections=200" start > /dev/null ||
		{ cat "$pg_dir/run/log"; return 1; }
	export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	# The command that restarts it, for riverhook's test of a fleet across
	# a restart (run on its own: every test on the server sees it).
	cat >"$pg_dir/restart" <<SH
#!/bin/sh
if [ "\$(id -u)" = 0 ]; then
	exec su postgres -s /bin/sh -c "$pg_bin/pg_ctl -D $pg_dir/data -m fast -w restart -l $pg_dir/run/log -o '-h 127.0.0.1 -p $port -k $pg_dir/run -c fsync=off -c max_connections=200' >/dev/null"
fi
exec $pg_bin/pg_ctl -D $pg_dir/data -m fast -w restart -l $pg_dir/run/log -o '-h 127.0.0.1 -p $port -k $pg_dir/run -c fsync=off -c max_connections=200' >/dev/null
SH
	chmod 755 "$pg_dir/restart"
	export TEST_PG_RESTART="$pg_dir/restart"
	echo "started a throwaway PostgreSQL on 127.0.0.1:$port"
}
