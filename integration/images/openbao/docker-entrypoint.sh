#!/usr/bin/env bash
# Entrypoint of ayatori-test/openbao, after the upstream openbao image's:
#   BAO_* variables are also exported as the VAULT_* names the server reads
#   (BAO_DEV_ROOT_TOKEN_ID, BAO_DEV_LISTEN_ADDRESS, BAO_ADDR, BAO_TOKEN, ...);
#   BAO_LOCAL_CONFIG is written to /openbao/config/local.json;
#   "server ..." runs `vault server -config=/openbao/config
#   -dev-root-token-id=$BAO_DEV_ROOT_TOKEN_ID
#   -dev-listen-address=${BAO_DEV_LISTEN_ADDRESS:-0.0.0.0:8200} ...`
#   (so `server -dev` listens on all interfaces with the given root token,
#   and `server` alone serves the configuration files in /openbao/config);
#   a first argument starting with "-" means "vault <args>"; a vault
#   subcommand (version, status, ...) runs vault; "bao ..." runs vault;
#   started as root, it chowns /openbao/{config,file,logs} and drops to the
#   openbao user. mlock is never used (no IPC_LOCK needed): dev mode does not
#   lock memory and configurations are expected to say disable_mlock = true.
set -euo pipefail

for name in $(compgen -e); do
	if [[ $name == BAO_* ]]; then
		vault_name="VAULT_${name#BAO_}"
		[[ -n ${!vault_name+set} ]] || export "$vault_name=${!name}"
	fi
done

config_dir=/openbao/config
if [[ -n ${BAO_LOCAL_CONFIG:-} ]]; then
	printf '%s\n' "$BAO_LOCAL_CONFIG" >"$config_dir/local.json"
fi

if [[ ${1:-} == -* ]]; then
	set -- vault "$@"
fi
case "${1:-}" in
server)
	shift
	set -- vault server \
		-config="$config_dir" \
		-dev-root-token-id="${VAULT_DEV_ROOT_TOKEN_ID:-}" \
		-dev-listen-address="${VAULT_DEV_LISTEN_ADDRESS:-0.0.0.0:8200}" \
		"$@"
	;;
bao) shift && set -- vault "$@" ;;
version) set -- vault version ;;
vault) ;;
*)
	if [[ -n ${1:-} ]] && vault --help "$1" 2>&1 | grep -q "vault $1"; then
		set -- vault "$@"
	fi
	;;
esac

if [[ ${1:-} == vault && $(id -u) == 0 ]]; then
	for d in /openbao/config /openbao/file /openbao/logs; do
		if [[ -d $d && "$(stat -c %u "$d")" != "$(id -u openbao)" ]]; then
			chown -R openbao:openbao "$d" || echo "could not chown $d"
		fi
	done
	exec setpriv --reuid=openbao --regid=openbao --init-groups env HOME=/openbao "$@"
fi
exec "$@"
