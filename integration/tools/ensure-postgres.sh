#!/usr/bin/env bash
# Makes sure the PostgreSQL 15 server binaries the integration harness runs
# are present, before anything slow starts (`make demo|dev|test|bench` and
# .ci/run call it first). Order: $AYATORI_POSTGRES_BIN_DIR, then Debian's
# /usr/lib/postgresql/15/bin. When missing, installs Debian's postgresql-15
# with apt if it can do so without a password (root, or sudo -n), else
# prints the command and fails.
set -euo pipefail

dir=${AYATORI_POSTGRES_BIN_DIR:-/usr/lib/postgresql/15/bin}
if [[ -x $dir/initdb && -x $dir/postgres ]]; then
	exit 0
fi
if [[ -n ${AYATORI_POSTGRES_BIN_DIR:-} ]]; then
	echo "ensure-postgres: AYATORI_POSTGRES_BIN_DIR=$dir has no initdb/postgres" >&2
	exit 1
fi
run=()
if [[ $(id -u) -ne 0 ]]; then
	if sudo -n true 2>/dev/null; then
		run=(sudo -n)
	else
		echo "ensure-postgres: PostgreSQL 15 server binaries are missing; install them with" >&2
		echo "  sudo apt-get install -y postgresql-15" >&2
		echo "or set AYATORI_POSTGRES_BIN_DIR to a directory holding initdb and postgres (version 15)." >&2
		exit 1
	fi
fi
echo "ensure-postgres: installing Debian's postgresql-15 (server binaries for the local stack)"
"${run[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${run[@]}" apt-get install -y -qq postgresql-15 >/dev/null
[[ -x $dir/initdb ]] || { echo "ensure-postgres: postgresql-15 installed but $dir/initdb is missing" >&2; exit 1; }
