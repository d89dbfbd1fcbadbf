#!/usr/bin/env bash
# Make sure the PostgreSQL and Redis that the marked tests use answer; start them if not.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

postgres_answers() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_answers() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ]; }

wait_for() {
  local name=$1 check=$2
  for _ in $(seq 60); do "$check" && return 0; sleep 0.5; done
  echo "$name does not answer on 127.0.0.1" >&2
  return 1
}

if ! command -v pg_isready >/dev/null || ! command -v redis-cli >/dev/null; then
  as_root apt-get -o DPkg::Lock::Timeout=600 update -qq
  as_root env DEBIAN_FRONTEND=noninteractive \
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq postgresql redis-server >/dev/null
fi

if ! postgres_answers; then
  echo "starting PostgreSQL"
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_for PostgreSQL postgres_answers
fi
# The tests use the database `test` as user postgres over TCP.
if ! psql -h 127.0.0.1 -U postgres -d test -c 'select 1' >/dev/null 2>&1; then
  as_root su postgres -c "psql -c \"create database test\"" >/dev/null 2>&1 || true
fi

if ! redis_answers; then
  echo "starting Redis"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for Redis redis_answers
fi
echo "PostgreSQL and Redis answer"
