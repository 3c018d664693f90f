#!/usr/bin/env bash
# Builds picolet's Debian package from a static binary, with dpkg-deb only
# (no debhelper: the binary is already built; the maintainer scripts below
# are what dh_installsystemd would generate for the unit):
#
#   packaging/deb.sh <binary> <amd64|arm64> <version> <out-dir>
#
# The package: /usr/bin/picolet, the systemd unit, /etc/picolet/config.yaml
# and registries.yaml as conffiles (an operator's edits survive upgrades),
# and the copyright and changelog Debian asks for. Installing enables and
# starts the service; an upgrade restarts it (KillMode=process: the
# containers keep running); removing stops it and removes picolet's pods,
# state and network (`picolet uninstall --package`); purging removes
# /etc/picolet.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$1 ARCH=$2 VERSION=$3 OUT=$4
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
R="$W/picolet_${VERSION}_$ARCH"
install -d -m 0755 "$R/DEBIAN" "$R/usr/bin" "$R/usr/lib/systemd/system" \
  "$R/etc/picolet" "$R/usr/share/doc/picolet" "$R/usr/share/lintian/overrides" \
  "$R/usr/share/man/man1"
install -m 0755 "$BIN" "$R/usr/bin/picolet"
sed 's|@BIN@|/usr/bin/picolet|g' packaging/picolet.service > "$R/usr/lib/systemd/system/picolet.service"
install -m 0644 examples/config.yaml "$R/etc/picolet/config.yaml"
install -m 0644 packaging/registries.yaml "$R/etc/picolet/registries.yaml"
chmod 0644 "$R/usr/lib/systemd/system/picolet.service"
gzip -9n < packaging/picolet.1 > "$R/usr/share/man/man1/picolet.1.gz"
cat > "$R/usr/share/doc/picolet/copyright" <<'TXT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: picolet

Files: *
Copyright: 2026 the picolet authors
License: Apache-2.0

License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 can be
 found in /usr/share/common-licenses/Apache-2.0.
TXT
# The changelog's date is the last commit's, so the package is the same
# bytes for the same tree.
DATE=$(git log -1 --format=%cD 2>/dev/null || date -R)
printf 'picolet (%s) unstable; urgency=medium\n\n  * Release %s.\n\n -- picolet maintainers <maintainers@picolet.invalid>  %s\n' \
  "$VERSION" "$VERSION" "$DATE" | gzip -9n > "$R/usr/share/doc/picolet/changelog.gz"
cat > "$R/usr/share/lintian/overrides/picolet" <<'TXT'
# serde_yaml's parser is unsafe-libyaml, a Rust translation of libyaml
# compiled from crates.io, not a copy of Debian's C library.
picolet: embedded-library libyaml [usr/bin/picolet]
# Static on purpose: one binary for every device, no libc to match.
picolet: statically-linked-binary [usr/bin/picolet]
TXT
chmod 0644 "$R/usr/share/doc/picolet/"* "$R/usr/share/lintian/overrides/picolet" "$R/usr/share/man/man1/picolet.1.gz"
printf '/etc/picolet/config.yaml\n/etc/picolet/registries.yaml\n' > "$R/DEBIAN/conffiles"
(cd "$R" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$R/DEBIAN/md5sums"
SIZE=$(du -sk --exclude=DEBIAN "$R" | cut -f1)
cat > "$R/DEBIAN/control" <<TXT
Package: picolet
Version: $VERSION
Architecture: $ARCH
Maintainer: picolet maintainers <maintainers@picolet.invalid>
Installed-Size: $SIZE
Recommends: iptables, kmod
Section: admin
Priority: optional
Description: node agent and container runtime for edge Linux
 picolet runs Kubernetes pods on a device: a CRI runtime with its own
 container init, and a node agent that runs static pods from a folder
 and can join a Kubernetes cluster, in one static binary.
TXT
cat > "$R/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
	mkdir -p /etc/picolet/manifests
fi
if [ "$1" = configure ] || [ "$1" = abort-upgrade ] || [ "$1" = abort-deconfigure ] || [ "$1" = abort-remove ]; then
	deb-systemd-helper unmask 'picolet.service' >/dev/null || true
	if deb-systemd-helper --quiet was-enabled 'picolet.service' || ! deb-systemd-helper debian-installed 'picolet.service'; then
		deb-systemd-helper enable 'picolet.service' >/dev/null || true
	else
		deb-systemd-helper update-state 'picolet.service' >/dev/null || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		# An upgrade restarts picolet only: the containers keep running.
		if [ -n "$2" ]; then action=restart; else action=start; fi
		deb-systemd-invoke "$action" 'picolet.service' >/dev/null || true
	fi
fi
SH
cat > "$R/DEBIAN/prerm" <<'SH'
#!/bin/sh
set -e
if [ "$1" = remove ]; then
	if [ -d /run/systemd/system ]; then
		deb-systemd-invoke stop 'picolet.service' >/dev/null || true
	fi
	# Removing the package removes picolet's pods, state and network.
	picolet uninstall --package --keep-config || true
fi
SH
cat > "$R/DEBIAN/postrm" <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = remove ]; then
	deb-systemd-helper mask 'picolet.service' >/dev/null || true
fi
if [ "$1" = purge ]; then
	deb-systemd-helper purge 'picolet.service' >/dev/null || true
	deb-systemd-helper unmask 'picolet.service' >/dev/null || true
	rm -rf /etc/picolet
fi
SH
chmod 0755 "$R/DEBIAN/postinst" "$R/DEBIAN/prerm" "$R/DEBIAN/postrm"
mkdir -p "$OUT"
dpkg-deb --root-owner-group -Zxz --build "$R" "$OUT/picolet_${VERSION}_$ARCH.deb" >/dev/null
echo "$OUT/picolet_${VERSION}_$ARCH.deb"
