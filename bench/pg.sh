# A throw-away PostgreSQL server for the bench scripts (sourced, not run). `pg_start DIR PORT
# [-c setting=value ...]` makes a cluster in DIR/pg (user `busbar`, trust authentication, no
# fsync at initdb) and starts it on 127.0.0.1:PORT pinned to core 0, beside busbar; as root it
# runs as the `postgres` user, which then owns DIR. `pg_stop DIR` stops it. `pgbin` is the
# newest installed server's bin folder.
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg=()
pg_start() {
  local dir=$1 port=$2
  shift 2
  if [[ $(id -u) -eq 0 ]]; then
    chown postgres: "$dir"
    as_pg=(runuser -u postgres --)
  fi
  "${as_pg[@]}" "$pgbin/initdb" -D "$dir/pg" -U busbar --auth=trust -E UTF8 --no-sync >/dev/null
  "${as_pg[@]}" taskset -c 0 "$pgbin/pg_ctl" -D "$dir/pg" -l "$dir/pg.log" -w \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 $*" start >/dev/null
}
pg_stop() {
  "${as_pg[@]}" "$pgbin/pg_ctl" -D "$1/pg" -m fast stop >/dev/null 2>&1 || true
}
