#!/usr/bin/env bash
# Builds the root filesystem of ayatori-test/debian:<suite> into <dir>:
# `debootstrap --variant=minbase` from a Debian mirror, then trimmed the way
# Debian's own container images are (no documentation, man pages or
# translations; apt keeps no package cache or lists; no recommends).
# Needs root (debootstrap chroots and creates device nodes).
# Usage: rootfs.sh <dir> <suite> <mirror>
# integration/images/build.sh hashes this file: editing it rebuilds the base
# image and everything on it.
set -euo pipefail

dir="$1" suite="$2" mirror="$3"

debootstrap --variant=minbase --components=main "$suite" "$dir" "$mirror"

security="${mirror%/debian}/debian-security"
cat >"$dir/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
SOURCES

# apt: no recommends or suggests, no package cache, no translations.
cat >"$dir/etc/apt/apt.conf.d/90ayatori-image" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT

# dpkg: leave documentation, man pages and translations out of every
# package installed later (copyright files stay).
cat >"$dir/etc/dpkg/dpkg.cfg.d/90ayatori-image" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
DPKG
find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$dir/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$dir/usr/share/man/"* "$dir/usr/share/info/"* "$dir/usr/share/lintian/"*
find "$dir/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +

# What a container runtime provides or a build leaves behind.
rm -rf "$dir/var/cache/apt/archives/"*.deb "$dir/var/cache/apt/"*.bin "$dir/var/lib/apt/lists/"* \
	"$dir/var/log/"*.log "$dir/var/log/apt/"* "$dir/debootstrap" "$dir/tmp/"* "$dir/var/tmp/"*
: >"$dir/etc/hostname"
: >"$dir/etc/resolv.conf"
: >"$dir/etc/machine-id"
