# Sourced by the VM scenarios (tests/vm/run.sh, tests/vm/systemd.sh): fetches
# Debian's kernel package $PKG for $ARCH into the cache $C (apt-get
# download, kept there across runs) and unpacks it into $C/k-$ARCH; sets
# KERNEL to its vmlinuz. Needs ARCH, KVER, PKG and C. Defines `addmod`.
#
# The pinned kernel; when the archive has dropped it (a security update
# replaces the ABI name, and the old package leaves debian-security), the
# one the metapackage depends on now.
if ! ls "$C/${PKG}"_*.deb >/dev/null 2>&1 && ! (cd "$C" && apt-get download "$PKG:$ARCH" >/dev/null 2>&1); then
  META="linux-image-$([ "$ARCH" = amd64 ] && echo cloud-amd64 || echo arm64)"
  PKG=$(apt-cache depends "$META:$ARCH" | sed -n 's/^ *Depends: \(linux-image-[0-9][^:]*\).*/\1/p' | head -1)
  [ -n "$PKG" ] || { echo "vm: neither linux-image-$KVER nor $META in the archive" >&2; exit 1; }
  echo "vm $ARCH: linux-image-$KVER is gone from the archive; using $PKG" >&2
  (cd "$C" && { ls "${PKG}"_*.deb >/dev/null 2>&1 || apt-get download "$PKG:$ARCH" >/dev/null; })
fi
(cd "$C" && rm -rf "k-$ARCH" && dpkg-deb -x "${PKG}"_*.deb "k-$ARCH")
KERNEL=$(ls "$C/k-$ARCH"/boot/vmlinuz-*)

# addmod DIR NAME: copies module NAME's .ko into DIR, each after what it
# depends on (read from its .modinfo: busybox insmod does not resolve
# them; built-in ones have no .ko), and appends the names in load order to
# LOAD.
LOAD=""
addmod() {
  local f d
  f=$(find "$C/k-$ARCH/lib/modules" -name "$2.ko" | head -1)
  [ -n "$f" ] || return 0
  case " $LOAD " in *" $2 "*) return 0 ;; esac
  for d in $(grep -a -o 'depends=[a-z0-9_,-]*' "$f" | head -1 | cut -d= -f2 | tr , ' '); do addmod "$1" "$d"; done
  cp "$f" "$1/$2.ko"
  LOAD="$LOAD $2"
}
