#!/usr/bin/env bash
# Records a real memcg OOM kill as /dev/kmsg shows it, on Debian's own
# kernel booted under qemu-system (TCG; no KVM needed), for the OOM parser's
# test data (agent/testdata/kmsg-<kernel>-<arch>-memcg-oom.txt).
#
#   sudo tests/vm/record-kmsg-oom.sh amd64|arm64 > out.txt
#
# Fetches the kernel (and for arm64 busybox-static:arm64) from the Debian
# archive with apt-get download into /var/cache/picolet-vm; the guest is a
# busybox initramfs that mounts cgroup2, puts `tail /dev/zero` into a
# 16 MiB memcg laid out like a pod's (kubepods/besteffort/pod<uid>/<id>),
# dumps /dev/kmsg to the console and powers off. Prints the records from
# "invoked oom-killer" to "Killed process".
set -euo pipefail
ARCH="${1:?amd64 or arm64}"
KVER=6.1.0-56
C=/var/cache/picolet-vm
mkdir -p "$C"
cd "$C"
need() { command -v "$1" >/dev/null || apt-get install -y -qq --no-install-recommends "$2" >/dev/null; }
need cpio cpio
case "$ARCH" in
  amd64)
    need qemu-system-x86_64 qemu-system-x86
    PKG="linux-image-$KVER-cloud-amd64"; BUSYBOX=/bin/busybox
    QEMU=(qemu-system-x86_64 -cpu max); CONSOLE=ttyS0 ;;
  arm64)
    need qemu-system-aarch64 qemu-system-arm
    dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64; apt-get update -qq; }
    PKG="linux-image-$KVER-arm64:arm64"
    ls busybox-static_*_arm64.deb >/dev/null 2>&1 || apt-get download busybox-static:arm64 >/dev/null
    rm -rf bb-arm64 && dpkg-deb -x busybox-static_*_arm64.deb bb-arm64
    BUSYBOX="$C/bb-arm64/bin/busybox"
    QEMU=(qemu-system-aarch64 -M virt -cpu cortex-a72); CONSOLE=ttyAMA0 ;;
  *) echo "arch: amd64 or arm64" >&2; exit 2 ;;
esac
ls "${PKG%%:*}"_*.deb >/dev/null 2>&1 || apt-get download "$PKG" >/dev/null
rm -rf "k-$ARCH" && dpkg-deb -x "${PKG%%:*}"_*.deb "k-$ARCH"
KERNEL=$(ls "k-$ARCH"/boot/vmlinuz-*)

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/root/bin" "$W/root/proc" "$W/root/sys" "$W/root/dev"
cp "$BUSYBOX" "$W/root/bin/busybox"
for a in sh mount mkdir echo cat sleep tail poweroff kill; do ln -s busybox "$W/root/bin/$a"; done
cat > "$W/root/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t cgroup2 none /sys/fs/cgroup
P=/sys/fs/cgroup
for d in kubepods besteffort pod0a1b2c3d4e5f60718293a4b5c6d7e8f9; do
  echo +memory > $P/cgroup.subtree_control
  P=$P/$d
  mkdir -p $P
done
echo +memory > $P/cgroup.subtree_control
C=$P/c0ffee
mkdir -p $C
echo 16M > $C/memory.max
sh -c "echo \$\$ > $C/cgroup.procs; exec tail /dev/zero"
echo KMSG-BEGIN
cat /dev/kmsg & P=$!
sleep 1
kill $P
echo KMSG-END
poweroff -f
INIT
chmod +x "$W/root/init"
(cd "$W/root" && find . | cpio -o -H newc 2>/dev/null | gzip > "$W/initrd.gz")
timeout 300 "${QEMU[@]}" -smp 2 -m 1024 -kernel "$KERNEL" -initrd "$W/initrd.gz" \
  -append "console=$CONSOLE rdinit=/init panic=-1 quiet" -nographic -no-reboot > "$W/console.txt" 2>&1
tr -d '\r' < "$W/console.txt" | sed -n '/^KMSG-BEGIN/,/^KMSG-END/p' \
  | awk '/invoked oom-killer/{f=1} f{print} /Killed process/{if(f)exit}'
