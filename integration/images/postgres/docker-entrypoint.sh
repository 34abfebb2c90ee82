#!/usr/bin/env bash
# Entrypoint of ayatori-test/postgres:15. It keeps the environment contract
# of the official postgres image (docker-library/postgres) that
# testcontainers-go's postgres module and its users rely on:
#   POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust),
#   POSTGRES_USER (default postgres), POSTGRES_DB (default $POSTGRES_USER),
#   POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD (default scram-sha-256),
#   /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz|*.sql.xz|*.sql.zst run once,
#   on an empty $PGDATA, against a temporary socket-only server;
#   arguments after "postgres" (e.g. -c ssl=on -c ssl_cert_file=...) go to the
#   temporary server and the real one; a first argument starting with "-" means
#   "postgres <args>".
# Readiness: the log says "database system is ready to accept connections"
# once for the temporary server and once for the real one (the module's
# BasicWaitStrategies waits for two), once on a restart with data. Started as
# root, it fixes ownership of $PGDATA and drops to the postgres user; postgres
# runs as PID 1 (exec), so docker stop (SIGINT) is a fast shutdown.
set -Eeuo pipefail

if [[ ${1:-} == -* ]]; then
	set -- postgres "$@"
fi
if [[ ${1:-} != postgres ]]; then
	exec "$@"
fi

if [[ $(id -u) == 0 ]]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	find "$PGDATA" \! -user postgres -exec chown postgres:postgres '{}' +
	chown postgres:postgres /var/run/postgresql
	chmod 0700 "$PGDATA"
	chmod 3777 /var/run/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups env HOME=/var/lib/postgresql "${BASH_SOURCE[0]}" "$@"
fi

if [[ ! -s $PGDATA/PG_VERSION ]]; then
	: "${POSTGRES_USER:=postgres}"
	: "${POSTGRES_DB:=$POSTGRES_USER}"
	: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
	if [[ -z ${POSTGRES_PASSWORD:-} && $POSTGRES_HOST_AUTH_METHOD != trust ]]; then
		cat >&2 <<'MSG'
Error: Database is uninitialized and superuser password is not specified.
       You must specify POSTGRES_PASSWORD to a non-empty value for the
       superuser. For example, "-e POSTGRES_PASSWORD=password" on "docker run".
       (or POSTGRES_HOST_AUTH_METHOD=trust to allow all connections without a password)
MSG
		exit 1
	fi
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is word-split, as in the official image
	initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
		${POSTGRES_INITDB_ARGS:-} -D "$PGDATA"
	printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
	printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

	# The temporary server: Unix socket only, with the caller's arguments.
	export PGPASSWORD="${PGPASSWORD:-${POSTGRES_PASSWORD:-}}"
	PGUSER="$POSTGRES_USER" pg_ctl -D "$PGDATA" -w start \
		-o "$(printf '%q ' "${@:2}" -c listen_addresses='' -p "${PGPORT:-5432}")"
	psql=(env PGHOST= PGHOSTADDR= psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
	exists="$("${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" --tuples-only <<<"SELECT 1 FROM pg_database WHERE datname = :'db' ;")"
	if [[ -z ${exists//[[:space:]]/} ]]; then
		"${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db" ;'
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		[[ -e $f ]] || continue
		case "$f" in
		*.sh)
			if [[ -x $f ]]; then
				printf '%s: running %s\n' "$0" "$f"
				"$f"
			else
				printf '%s: sourcing %s\n' "$0" "$f"
				# shellcheck source=/dev/null
				. "$f"
			fi
			;;
		*.sql) printf '%s: running %s\n' "$0" "$f" && "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
		*.sql.gz) printf '%s: running %s\n' "$0" "$f" && gunzip -c "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
		*.sql.xz) printf '%s: running %s\n' "$0" "$f" && xzcat "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
		*.sql.zst) printf '%s: running %s\n' "$0" "$f" && zstd -dc "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
		*) printf '%s: ignoring %s\n' "$0" "$f" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	unset PGPASSWORD
	printf '\nPostgreSQL init process complete; ready for start up.\n\n'
else
	printf '\nPostgreSQL Database directory appears to contain a database; Skipping initialization\n\n'
fi

exec "$@"
