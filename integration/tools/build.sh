#!/usr/bin/env bash
# Builds the tools and real test servers pinned in versions.env from the Go
# module proxy into a per-version cache outside the clone:
#   ${AYATORI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ayatori/tools}/<name>-<version>/<binary>
# A tool is rebuilt only when its binary is missing. Each build prints its
# duration. Usage: build.sh [name...]   (default: all)
# Names: controller-gen golangci-lint etcd kube-apiserver vault external-secrets nats-server
#        kube-controller-manager kube-scheduler kwok (the workload tests' cluster)
#        prometheus promtool (the alert rule and dashboard tests)
#        e2e = kubelet kube-proxy kubectl containerd cni-plugins coredns (make e2e's
#        real node; not in the default list, make e2e builds them)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
source "$here/versions.env"
cache="${AYATORI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ayatori/tools}"
mkdir -p "$cache"
export CGO_ENABLED=0

log() { printf '[tools] %s\n' "$*"; }

# wrapper <dir> <module-path> <import-path> writes a throwaway module that
# requires the tool, so tools whose own go.mod has replace directives build.
wrapper() {
	local dir="$1" import="$2"
	cat >"$dir/tools.go" <<GO
//go:build tools

package tools

import _ "$import"
GO
}

# build <name> <version> <binary> <function-that-builds-into-$out>
build() {
	local name="$1" version="$2" binary="$3" recipe="$4"
	local dest="$cache/$name-$version"
	if [[ -x "$dest/$binary" ]]; then
		log "$name $version: cached at $dest"
		return 0
	fi
	log "$name $version: building into $dest"
	local start=$SECONDS work
	work="$(mktemp -d "${TMPDIR:-/tmp}/ayatori-tool-$name.XXXXXX")"
	mkdir -p "$dest"
	out="$dest/.$binary.partial"
	if ! (cd "$work" && "$recipe" "$version" "$out") >"$work/build.log" 2>&1; then
		log "$name $version: build FAILED; last lines of the log:"
		tail -n 40 "$work/build.log" >&2
		rm -rf "$work" "$out"
		return 1
	fi
	mv "$out" "$dest/$binary"
	rm -rf "$work"
	log "$name $version: built in $((SECONDS - start))s"
}

recipe_controller_gen() {
	GOBIN="$(dirname "$2")" go install "sigs.k8s.io/controller-tools/cmd/controller-gen@$1"
	mv "$(dirname "$2")/controller-gen" "$2"
}

recipe_golangci_lint() {
	GOBIN="$(dirname "$2")" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$1"
	mv "$(dirname "$2")/golangci-lint" "$2"
}

recipe_etcd() {
	printf 'module ayatori.tools/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$1" >go.mod
	wrapper . go.etcd.io/etcd/server/v3
	go mod tidy
	go build -trimpath -o "$2" go.etcd.io/etcd/server/v3
}

# kube_component <cmd> <version> <out>: one wrapper module that requires
# k8s.io/kubernetes at <version> with every staging module pinned to
# KUBE_STAGING_VERSION, building k8s.io/kubernetes/cmd/<cmd>.
kube_component() {
	local cmd="$1" v="$2" out="$3" minor staging
	minor="$(echo "$v" | cut -d. -f2)"
	{
		printf 'module ayatori.tools/%s\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$cmd" "$v"
		for staging in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go \
			cloud-provider cluster-bootstrap code-generator component-base component-helpers \
			controller-manager cri-api cri-client cri-streaming csi-translation-lib \
			dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator \
			kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils \
			pod-security-admission sample-apiserver streaming; do
			printf '\tk8s.io/%s => k8s.io/%s %s\n' "$staging" "$staging" "$KUBE_STAGING_VERSION"
		done
		printf ')\n'
	} >go.mod
	wrapper . "k8s.io/kubernetes/cmd/$cmd"
	go mod tidy
	local pkg=k8s.io/component-base/version
	go build -trimpath \
		-ldflags "-X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
		-o "$out" "k8s.io/kubernetes/cmd/$cmd"
}

recipe_kube_apiserver() { kube_component kube-apiserver "$1" "$2"; }
recipe_kube_controller_manager() { kube_component kube-controller-manager "$1" "$2"; }
recipe_kube_scheduler() { kube_component kube-scheduler "$1" "$2"; }
# The real node of the end-to-end cluster (make e2e) and the kubectl it applies with.
recipe_kubelet() { kube_component kubelet "$1" "$2"; }
recipe_kube_proxy() { kube_component kube-proxy "$1" "$2"; }
recipe_kubectl() { kube_component kubectl "$1" "$2"; }

# containerd 2.x (daemon, runc shim, ctr) for the end-to-end node; runc is
# Debian's. Static, without the cgo-only snapshotters.
recipe_containerd() {
	printf 'module ayatori.tools/containerd\n\ngo 1.26\n\nrequire github.com/containerd/containerd/v2 %s\n' "$1" >go.mod
	wrapper . github.com/containerd/containerd/v2/cmd/containerd
	cat >>tools.go <<GO
import _ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
import _ "github.com/containerd/containerd/v2/cmd/ctr"
GO
	go mod tidy
	local dir tags=no_btrfs,no_devmapper,no_zfs,no_aufs
	dir="$(dirname "$2")"
	go build -trimpath -tags "$tags" -o "$dir/containerd-shim-runc-v2" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 || return 1
	go build -trimpath -tags "$tags" -o "$dir/ctr" github.com/containerd/containerd/v2/cmd/ctr || return 1
	go build -trimpath -tags "$tags" -o "$2" github.com/containerd/containerd/v2/cmd/containerd
}

# The CNI plugins the end-to-end node's pod network uses (bridge, IPAM,
# loopback, portmap, firewall: Docker's FORWARD policy DROP would drop
# bridged pod-to-pod traffic, which br_netfilter sends through iptables).
recipe_cni_plugins() {
	printf 'module ayatori.tools/cni-plugins\n\ngo 1.26\n\nrequire github.com/containernetworking/plugins %s\n' "$1" >go.mod
	wrapper . github.com/containernetworking/plugins/plugins/main/bridge
	local dir p plugins=(main/loopback ipam/host-local meta/portmap meta/firewall)
	for p in "${plugins[@]}"; do
		printf 'import _ "github.com/containernetworking/plugins/plugins/%s"\n' "$p" >>tools.go
	done
	go mod tidy
	dir="$(dirname "$2")"
	# (errexit is off inside a recipe: build.sh calls it under `if !`)
	for p in "${plugins[@]}"; do
		go build -trimpath -o "$dir/$(basename "$p")" "github.com/containernetworking/plugins/plugins/$p" || return 1
	done
	go build -trimpath -o "$2" github.com/containernetworking/plugins/plugins/main/bridge
}

# CoreDNS, the end-to-end cluster's DNS (runs as a pod of the image make images builds).
recipe_coredns() {
	printf 'module ayatori.tools/coredns\n\ngo 1.26\n\nrequire github.com/coredns/coredns %s\n' "$1" >go.mod
	wrapper . github.com/coredns/coredns
	go mod tidy
	go build -trimpath -o "$2" github.com/coredns/coredns
}

# Prometheus and promtool (operability, issue 27): promtool unit-tests the
# shipped alert rules; Prometheus scrapes a real manager in the alert and
# dashboard tests. Service discovery plugins are left out (remove_all_sd):
# the tests use static and file targets. No web UI assets: the API is enough.
prometheus_module() {
	# Module v0.MMmPP.x is Prometheus M.mm.x (v0.316.0: 3.16.0).
	local n="${2#v0.}" version
	version="$((${n%%.*} / 100)).$((${n%%.*} % 100)).${n#*.}"
	printf 'module ayatori.tools/%s\n\ngo 1.26\n\nrequire github.com/prometheus/prometheus %s\n' "$1" "$2" >go.mod
	wrapper . "github.com/prometheus/prometheus/cmd/$1"
	go mod tidy
	go build -trimpath -tags remove_all_sd \
		-ldflags "-X github.com/prometheus/common/version.Version=$version -X github.com/prometheus/common/version.Branch=ayatori" \
		-o "$3" "github.com/prometheus/prometheus/cmd/$1"
}
recipe_prometheus() { prometheus_module prometheus "$1" "$2"; }
recipe_promtool() { prometheus_module promtool "$1" "$2"; }

# kwok: fake nodes and pod lifecycles driven by Stage objects (workload tests).
recipe_kwok() {
	printf 'module ayatori.tools/kwok\n\ngo 1.26\n\nrequire sigs.k8s.io/kwok %s\n' "$1" >go.mod
	wrapper . sigs.k8s.io/kwok/cmd/kwok
	go mod tidy
	go build -trimpath -o "$2" sigs.k8s.io/kwok/cmd/kwok
}

recipe_vault() {
	cat >go.mod <<MOD
module ayatori.tools/vault

go 1.26

// An old bundled database driver parses a certificate with a negative serial.
godebug x509negativeserial=1

require github.com/hashicorp/vault $1

replace (
	github.com/hashicorp/vault/api => github.com/hashicorp/vault/api v1.9.0
	github.com/hashicorp/vault/api/auth/approle => github.com/hashicorp/vault/api/auth/approle v0.1.0
	github.com/hashicorp/vault/api/auth/kubernetes => github.com/hashicorp/vault/api/auth/kubernetes v0.1.0
	github.com/hashicorp/vault/api/auth/userpass => github.com/hashicorp/vault/api/auth/userpass v0.1.0
	github.com/hashicorp/vault/sdk => github.com/hashicorp/vault/sdk v0.8.1
)
MOD
	wrapper . github.com/hashicorp/vault
	go mod tidy
	go build -trimpath -o "$2" github.com/hashicorp/vault
}

# nats-server as a process, for the three-node JetStream cluster tests (a
# node is SIGKILLed, which an embedded server cannot be). Same version as the
# embedded server in go.mod.
recipe_nats_server() {
	printf 'module ayatori.tools/nats-server\n\ngo 1.26\n\nrequire github.com/nats-io/nats-server/v2 %s\n' "$1" >go.mod
	wrapper . github.com/nats-io/nats-server/v2
	go mod tidy
	go build -trimpath -o "$2" github.com/nats-io/nats-server/v2
}

recipe_external_secrets() {
	cat >go.mod <<MOD
module ayatori.tools/external-secrets

go 1.26

require github.com/external-secrets/external-secrets $1

replace github.com/Masterminds/sprig/v3 => github.com/external-secrets/sprig/v3 v3.3.0
MOD
	wrapper . github.com/external-secrets/external-secrets
	go mod tidy
	go build -trimpath -o "$2" github.com/external-secrets/external-secrets
	# The CRDs ship inside the module; keep a copy next to the binary.
	local moddir
	moddir="$(go list -m -f '{{.Dir}}' github.com/external-secrets/external-secrets)"
	rm -rf "$(dirname "$2")/crds"
	cp -r "$moddir/config/crds/bases" "$(dirname "$2")/crds"
	chmod -R u+w "$(dirname "$2")/crds"
}

names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(controller-gen golangci-lint etcd kube-apiserver kube-controller-manager kube-scheduler kwok vault external-secrets nats-server prometheus promtool)
total=$SECONDS
for n in "${names[@]}"; do
	case "$n" in
	controller-gen) build controller-gen "$CONTROLLER_TOOLS_VERSION" controller-gen recipe_controller_gen ;;
	golangci-lint) build golangci-lint "$GOLANGCI_LINT_VERSION" golangci-lint recipe_golangci_lint ;;
	etcd) build etcd "$ETCD_VERSION" etcd recipe_etcd ;;
	kube-apiserver) build kube-apiserver "$KUBE_APISERVER_VERSION" kube-apiserver recipe_kube_apiserver ;;
	kube-controller-manager) build kube-controller-manager "$KUBE_APISERVER_VERSION" kube-controller-manager recipe_kube_controller_manager ;;
	kube-scheduler) build kube-scheduler "$KUBE_APISERVER_VERSION" kube-scheduler recipe_kube_scheduler ;;
	kwok) build kwok "$KWOK_VERSION" kwok recipe_kwok ;;
	prometheus) build prometheus "$PROMETHEUS_VERSION" prometheus recipe_prometheus ;;
	promtool) build promtool "$PROMETHEUS_VERSION" promtool recipe_promtool ;;
	vault) build vault "$VAULT_VERSION" vault recipe_vault ;;
	external-secrets) build external-secrets "$EXTERNAL_SECRETS_VERSION" external-secrets recipe_external_secrets ;;
	nats-server) build nats-server "$NATS_SERVER_VERSION" nats-server recipe_nats_server ;;
	kubelet) build kubelet "$KUBE_APISERVER_VERSION" kubelet recipe_kubelet ;;
	kube-proxy) build kube-proxy "$KUBE_APISERVER_VERSION" kube-proxy recipe_kube_proxy ;;
	kubectl) build kubectl "$KUBE_APISERVER_VERSION" kubectl recipe_kubectl ;;
	containerd) build containerd "$CONTAINERD_VERSION" containerd recipe_containerd ;;
	cni-plugins) build cni-plugins "$CNI_PLUGINS_VERSION" bridge recipe_cni_plugins ;;
	coredns) build coredns "$COREDNS_VERSION" coredns recipe_coredns ;;
	e2e) "$0" kubelet kube-proxy kubectl containerd cni-plugins coredns ;;
	*) log "unknown tool: $n"; exit 2 ;;
	esac
done
log "all tools ready in $((SECONDS - total))s (cache: $cache)"
