#!/usr/bin/env bash
# `make images`: the container images of the testcontainers provider, built
# on this machine from Debian packages and the project's own tool builds, so
# no image registry is needed.
#
#   ayatori-test/debian:bookworm  debootstrap --variant=minbase + docker import
#   ayatori-test/postgres:15      Debian's postgresql-15, entrypoint with the
#                                 official postgres image's environment contract
#   ayatori-test/openbao:<v>      the cached Vault build (the OpenBao-compatible
#                                 test server), entrypoint of the openbao image
#   ayatori-test/nats:<v>         the cached nats-server build, JetStream on
#   ayatori-test/golang:<v>       this machine's Go toolchain (GOROOT)
#   ayatori-manager:latest        the product image: the repository's
#                                 Dockerfile with the two local images as
#                                 BUILD_IMAGE and RUNTIME_IMAGE
#
# Each image carries the label org.ayatori.images.inputs, the SHA-256 of its
# inputs (its directory under integration/images/, the binary it copies, the
# ID of the base image); it is rebuilt only when that hash changes, or for
# every image with AYATORI_IMAGES_REBUILD=1. `build.sh eso coredns pause`
# adds the end-to-end cluster's images (make e2e): ayatori-test/
# external-secrets:<v> and ayatori-test/coredns:<v> (cached builds on the
# base), ayatori-test/pause:e2e (pause.c, static). The Docker engine is installed
# with apt when missing and dockerd started when none answers (root or
# passwordless sudo). The product image relies on Docker's layer cache
# instead. Usage: build.sh [debian|postgres|openbao|nats|golang|manager ...]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
source "$here/../tools/versions.env"
tools="$here/../tools/build.sh"
cache="${AYATORI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ayatori/tools}"
mirror="${AYATORI_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
label=org.ayatori.images.inputs
export DOCKER_BUILDKIT=0 # the classic builder: no buildx plugin needed, and it never pulls a FROM image that exists locally

BASE_IMAGE="ayatori-test/debian:$suite"
POSTGRES_IMAGE="ayatori-test/postgres:15"
OPENBAO_IMAGE="ayatori-test/openbao:${VAULT_VERSION#v}"
NATS_IMAGE="ayatori-test/nats:${NATS_SERVER_VERSION#v}"
GO_VERSION="$(go env GOVERSION)"
GOLANG_IMAGE="ayatori-test/golang:${GO_VERSION#go}"
# The product image, under the name deploy/manager/deployment.yaml uses.
MANAGER_IMAGE="${AYATORI_MANAGER_IMAGE:-ayatori-manager:latest}"
MANAGER_BUILD_IMAGE="ayatori-test/manager-build:latest"
# The end-to-end cluster's own images (make e2e): ESO, CoreDNS, the sandbox.
ESO_IMAGE="ayatori-test/external-secrets:${EXTERNAL_SECRETS_VERSION#v}"
COREDNS_IMAGE="ayatori-test/coredns:${COREDNS_VERSION#v}"
PAUSE_IMAGE="ayatori-test/pause:e2e"

log() { printf '[images] %s\n' "$*"; }
fail() {
	printf '[images] %s\n' "$*" >&2
	exit 1
}

# can_priv: root, or passwordless sudo.
can_priv() { [[ $(id -u) -eq 0 ]] || sudo -n true 2>/dev/null; }

# priv runs a command as root: directly when root, else through passwordless sudo.
priv() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		fail "needs root for: $*
run 'make images' as root or with passwordless sudo, or do it yourself first:
  sudo apt-get install -y docker.io debootstrap && sudo systemctl start docker
  sudo usermod -aG docker \"\$USER\"   # then log in again"
	fi
}

apt_install() {
	log "installing with apt: $*"
	priv apt-get update -qq
	priv env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# ensure_docker: a Docker engine that answers this user.
ensure_docker() {
	local out
	if out="$(docker info 2>&1 >/dev/null)"; then
		return 0
	fi
	if [[ $out == *"permission denied"* ]]; then
		fail "dockerd runs, but $(id -un) cannot use it (/var/run/docker.sock: permission denied); add yourself to the docker group:
  sudo usermod -aG docker \"\$USER\"   # then log in again"
	fi
	if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
		apt_install docker.io
	fi
	can_priv || fail "no Docker daemon answers ($out)
starting one needs root or passwordless sudo; do it yourself, then run 'make images' again:
  sudo systemctl start docker   # or: sudo dockerd &
  sudo usermod -aG docker \"\$USER\"   # then log in again"
	if ! priv docker info >/dev/null 2>&1; then
		local start=$SECONDS
		if [[ -d /run/systemd/system ]]; then
			log "starting dockerd (systemctl start docker)"
			priv systemctl start docker
		else
			local dlog="${AYATORI_DOCKERD_LOG:-/var/log/ayatori-dockerd.log}"
			log "starting dockerd in the background (no systemd; log: $dlog)"
			priv bash -c "nohup dockerd >>'$dlog' 2>&1 </dev/null &"
		fi
		until priv docker info >/dev/null 2>&1; do
			((SECONDS - start < 60)) || fail "dockerd did not answer within 60s"
			sleep 1
		done
		log "dockerd answered after $((SECONDS - start))s"
	fi
	docker info >/dev/null 2>&1 ||
		fail "dockerd runs, but $(id -un) cannot use it (/var/run/docker.sock); add yourself to the docker group:
  sudo usermod -aG docker \"\$USER\"   # then log in again"
}

# inputs <image>: the input hash the image was built from ("" when absent).
inputs() { docker image inspect -f "{{ index .Config.Labels \"$label\" }}" "$1" 2>/dev/null || true; }

# hash_files <file|dir>...: one SHA-256 over the names and contents.
hash_files() {
	local f
	for f in "$@"; do
		if [[ -d $f ]]; then
			(cd "$f" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
		else
			printf '%s  %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$(basename "$f")"
		fi
	done | sha256sum | cut -d' ' -f1
}

# fresh <image> <hash>: true when the image exists and was built from <hash>.
fresh() {
	[[ ${AYATORI_IMAGES_REBUILD:-} != 1 && "$(inputs "$1")" == "$2" ]]
}

# drop_old <image-id>: removes an image a rebuild replaced (when now untagged).
drop_old() {
	[[ -n $1 ]] || return 0
	if [[ -z "$(docker image inspect -f '{{ join .RepoTags "," }}' "$1" 2>/dev/null)" ]]; then
		docker image rm "$1" >/dev/null 2>&1 || true
	fi
}

build_debian() {
	command -v debootstrap >/dev/null 2>&1 || [[ -x /usr/sbin/debootstrap ]] || apt_install debootstrap
	local hash old start=$SECONDS work
	hash="$(printf '%s %s\n' "$(hash_files "$here/debian")" "$suite" | sha256sum | cut -d' ' -f1)"
	if fresh "$BASE_IMAGE" "$hash"; then
		log "$BASE_IMAGE: cached"
		return 0
	fi
	log "$BASE_IMAGE: debootstrap --variant=minbase $suite from $mirror"
	old="$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || true)"
	work="$(mktemp -d "${TMPDIR:-/var/tmp}/ayatori-rootfs.XXXXXX")"
	# shellcheck disable=SC2064
	trap "priv rm -rf '$work'" EXIT
	if ! priv env PATH="/usr/sbin:/sbin:$PATH" bash "$here/debian/rootfs.sh" "$work/rootfs" "$suite" "$mirror" >"$work/debootstrap.log" 2>&1; then
		tail -n 30 "$work/debootstrap.log" >&2
		fail "$BASE_IMAGE: debootstrap failed (log above)"
	fi
	priv tar -C "$work/rootfs" --numeric-owner -c . |
		docker import \
			--change "LABEL $label=$hash" \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
			--change 'CMD ["bash"]' \
			- "$BASE_IMAGE" >/dev/null
	priv rm -rf "$work"
	trap - EXIT
	drop_old "$old"
	log "$BASE_IMAGE: built in $((SECONDS - start))s"
}

# build_on_base <image> <dir under integration/images> [binary]: docker build
# of that directory (plus the binary, copied into the context) FROM the base.
build_on_base() {
	local image="$1" dir="$here/$2" binary="${3:-}" base hash old start=$SECONDS ctx
	base="$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")"
	hash="$(printf '%s %s %s\n' "$base" "$(hash_files "$dir")" "${binary:+$(hash_files "$binary")}" | sha256sum | cut -d' ' -f1)"
	if fresh "$image" "$hash"; then
		log "$image: cached"
		return 0
	fi
	log "$image: building"
	old="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
	ctx="$(mktemp -d "${TMPDIR:-/tmp}/ayatori-image.XXXXXX")"
	cp -a "$dir/." "$ctx/"
	if [[ -n $binary ]]; then
		ln "$binary" "$ctx/$(basename "$binary")" 2>/dev/null || cp "$binary" "$ctx/"
	fi
	if ! docker build --force-rm -q --build-arg "BASE=$BASE_IMAGE" --label "$label=$hash" -t "$image" "$ctx" >"$ctx.log" 2>&1; then
		tail -n 40 "$ctx.log" >&2
		rm -rf "$ctx" "$ctx.log"
		fail "$image: docker build failed (log above)"
	fi
	rm -rf "$ctx" "$ctx.log"
	drop_old "$old"
	log "$image: built in $((SECONDS - start))s"
}

# build_golang: the Go toolchain of this machine (its GOROOT) and its CA
# bundle on the base, for the product Dockerfile's BUILD_IMAGE.
build_golang() {
	local goroot base hash old start=$SECONDS ctx cabundle=${AYATORI_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
	goroot="$(go env GOROOT)"
	[[ -r $cabundle ]] || fail "no CA bundle at $cabundle (set AYATORI_CA_BUNDLE)"
	base="$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")"
	hash="$(printf '%s %s %s %s %s\n' "$base" "$(hash_files "$here/golang" "$cabundle")" "$GO_VERSION" "$goroot" | sha256sum | cut -d' ' -f1)"
	if fresh "$GOLANG_IMAGE" "$hash"; then
		log "$GOLANG_IMAGE: cached"
		return 0
	fi
	log "$GOLANG_IMAGE: building from $goroot"
	old="$(docker image inspect -f '{{.Id}}' "$GOLANG_IMAGE" 2>/dev/null || true)"
	ctx="$(mktemp -d "${TMPDIR:-/tmp}/ayatori-golang.XXXXXX")"
	# Hard links when allowed (same file system, our files), else a copy;
	# a failed `cp -al` leaves a partial tree behind, removed first.
	cp -al "$goroot" "$ctx/go" 2>/dev/null || { rm -rf "$ctx/go" && cp -a "$goroot" "$ctx/go"; }
	cp "$cabundle" "$ctx/ca-certificates.crt"
	if ! docker build --force-rm -q --build-arg "BASE=$BASE_IMAGE" --label "$label=$hash" \
		-f "$here/golang/Dockerfile" -t "$GOLANG_IMAGE" "$ctx" >"$ctx.log" 2>&1; then
		tail -n 40 "$ctx.log" >&2
		rm -rf "$ctx" "$ctx.log"
		fail "$GOLANG_IMAGE: docker build failed (log above)"
	fi
	rm -rf "$ctx" "$ctx.log"
	drop_old "$old"
	log "$GOLANG_IMAGE: built in $((SECONDS - start))s"
}

# build_manager: the product's Dockerfile (repository root) with the local
# bases; Docker's layer cache makes an unchanged tree a no-op. The build
# stage downloads modules from GOPROXY (the host's), so it runs on the host
# network. The build stage is tagged too (ayatori-test/manager-build), so its
# module download layer stays cached while go.mod and go.sum do not change;
# the stage images an earlier build left untagged are removed.
build_manager() {
	local root old start=$SECONDS log="${TMPDIR:-/tmp}/ayatori-manager-image.log" args deps
	root="$(cd "$here/../.." && pwd)"
	build_golang
	# The dependency packages as the build stage sees them (CGO off, Linux).
	deps="$(cd "$root" && CGO_ENABLED=0 GOOS=linux go list -deps -f '{{if and (not .Standard) .Module (not .Module.Main)}}{{.ImportPath}}{{end}}' ./cmd/ayatori-manager ./cmd/ayatori-journal)"
	deps="$(sort -u <<<"$deps" | tr '\n' ' ')"
	args=(--force-rm --network host --build-arg "BUILD_IMAGE=$GOLANG_IMAGE" --build-arg "RUNTIME_IMAGE=$BASE_IMAGE"
		--build-arg "GOPROXY=$(go env GOPROXY)"
		--build-arg "PRECOMPILE=$deps")
	old="$(docker image inspect -f '{{.Id}}' "$MANAGER_IMAGE" 2>/dev/null || true)"
	log "$MANAGER_IMAGE: docker build $root (BUILD_IMAGE=$GOLANG_IMAGE, RUNTIME_IMAGE=$BASE_IMAGE)"
	if ! { docker build "${args[@]}" --target build -t "$MANAGER_BUILD_IMAGE" "$root" &&
		docker build "${args[@]}" -t "$MANAGER_IMAGE" "$root"; } >"$log" 2>&1; then
		tail -n 40 "$log" >&2
		fail "$MANAGER_IMAGE: docker build failed (log above; full log $log)"
	fi
	if [[ $old != "$(docker image inspect -f '{{.Id}}' "$MANAGER_IMAGE")" ]]; then
		log "$MANAGER_IMAGE: built in $((SECONDS - start))s"
	else
		log "$MANAGER_IMAGE: up to date ($((SECONDS - start))s)"
	fi
	# Untagged images derived from ours (earlier builds' stages and finals;
	# they inherit the inputs label from the local bases); nobody else's.
	docker image prune -f --filter "label=$label" >/dev/null 2>&1 || true
}

# tool <name> <version>: the cached binary, built first when missing.
tool() {
	local bin="$cache/$1-$2/$1"
	[[ -x $bin ]] || "$tools" "$1" >&2
	[[ -x $bin ]] || fail "$bin missing after integration/tools/build.sh $1"
	printf '%s\n' "$bin"
}

want=("$@")
((${#want[@]})) || want=(debian postgres openbao nats manager)
total=$SECONDS
ensure_docker
build_debian
for w in "${want[@]}"; do
	case "$w" in
	debian) ;;
	postgres) build_on_base "$POSTGRES_IMAGE" postgres ;;
	openbao)
		bin="$(tool vault "$VAULT_VERSION")"
		build_on_base "$OPENBAO_IMAGE" openbao "$bin"
		;;
	nats)
		bin="$(tool nats-server "$NATS_SERVER_VERSION")"
		build_on_base "$NATS_IMAGE" nats "$bin"
		;;
	golang) build_golang ;;
	eso)
		bin="$(tool external-secrets "$EXTERNAL_SECRETS_VERSION")"
		build_on_base "$ESO_IMAGE" eso "$bin"
		;;
	coredns)
		bin="$(tool coredns "$COREDNS_VERSION")"
		build_on_base "$COREDNS_IMAGE" coredns "$bin"
		;;
	pause)
		pause_dir="$(mktemp -d "${TMPDIR:-/tmp}/ayatori-pause.XXXXXX")"
		gcc -static -Os -o "$pause_dir/pause" "$here/pause/pause.c"
		build_on_base "$PAUSE_IMAGE" pause "$pause_dir/pause"
		rm -rf "$pause_dir"
		;;
	manager) build_manager ;;
	*) fail "unknown image $w (want debian, postgres, openbao, nats, golang, manager, eso, coredns or pause)" ;;
	esac
done
for image in "$BASE_IMAGE" "$POSTGRES_IMAGE" "$OPENBAO_IMAGE" "$NATS_IMAGE" "$GOLANG_IMAGE" "$MANAGER_IMAGE" "$ESO_IMAGE" "$COREDNS_IMAGE" "$PAUSE_IMAGE"; do
	if docker image inspect "$image" >/dev/null 2>&1; then
		log "$(printf '%-30s %s' "$image" "$(docker image ls --format '{{.Size}}' "$image")")"
	fi
done
log "done in $((SECONDS - total))s"
