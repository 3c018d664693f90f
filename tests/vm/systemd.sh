#!/usr/bin/env bash
# Boots Debian 12 with its real systemd as PID 1 under qemu-system (TCG; no
# KVM needed) and checks picolet as a Debian package on it: the .deb
# installs and enables picolet.service, the demo static pod comes up at
# boot, survives `systemctl restart` and a kill -9 of the service, and
# `picolet upgrade` swaps the binary, rolls back a broken one, and a power
# cut in the middle of an upgrade leaves a working node; `dpkg -P` leaves
# nothing; then `picolet install --bundle` from the airgap bundle, the pod
# from its preloaded image, and `picolet uninstall` leaves nothing. All of it in one
# qemu run across guest reboots and a power cut (sysrq b): the guest script
# (tests/vm/systemd-guest.sh, run by a oneshot unit after multi-user.target)
# keeps its stage on the guest disk and prints `VMTEST ok|FAIL <check>`
# lines on the serial console; this script fails when any check failed or
# the run did not reach `VMTEST done`.
#
#   sudo tests/vm/systemd.sh [amd64]  # needs dist/picolet_*_amd64.deb,
#                                     # dist/picolet-x86_64 and the bundle
#                                     # dist/picolet-*-x86_64.tar.gz (scripts/dist.sh)
#   VM_DIST=<dir>: take the .deb and the binary from there instead of dist/
#   VM_DEMO_IMAGE=<tar>: the demo image, instead of `cargo xtask demo-image`
#   VM_CONSOLE_OUT=<file>: keep the guest's whole console there
#   VM_TIMEOUT=<s>: the whole qemu run's limit (default 900)
#
# The root filesystem is made by mmdebstrap from the Debian archive and
# cached as a tarball in /var/cache/picolet-vm, keyed by everything that
# goes into it (suite, packages, customization): only a change of those
# builds it again. The kernel is Debian's (tests/vm/kernel.sh), its modules
# are copied into the root filesystem for systemd and modprobe; a busybox
# initramfs loads the virtio disk's modules, mounts the ext4 root and
# switch_roots into systemd.
set -euo pipefail
cd "$(dirname "$0")/../.."
ARCH="${1:-amd64}"
KVER=6.1.0-56
C=/var/cache/picolet-vm
DIST="${VM_DIST:-dist}"
TIMEOUT="${VM_TIMEOUT:-900}"
mkdir -p "$C"
need() { command -v "$1" >/dev/null || apt-get install -y -qq --no-install-recommends "$2" >/dev/null; }
need cpio cpio
need mkfs.ext4 e2fsprogs
need mmdebstrap mmdebstrap
need depmod kmod
case "$ARCH" in
  amd64)
    need qemu-system-x86_64 qemu-system-x86
    PKG="linux-image-$KVER-cloud-amd64"; BUSYBOX=/bin/busybox; BIN="$DIST/picolet-x86_64"
    QEMU=(qemu-system-x86_64 -cpu max); CONSOLE=ttyS0 ;;
  *) echo "arch: amd64 (arm64 is tests/vm/run.sh only)" >&2; exit 2 ;;
esac
[ -x "$BIN" ] || { echo "vm: $BIN missing: run scripts/dist.sh first" >&2; exit 1; }
DEB=$(ls "$DIST"/picolet_*_"$ARCH".deb 2>/dev/null | tail -1)
[ -n "$DEB" ] || { echo "vm: $DIST/picolet_*_$ARCH.deb missing: run scripts/dist.sh first" >&2; exit 1; }
BUNDLE=$(ls "$DIST"/picolet-*-"${BIN##*-}".tar.gz 2>/dev/null | tail -1)
[ -n "$BUNDLE" ] || { echo "vm: $DIST/picolet-*-${BIN##*-}.tar.gz missing: run scripts/dist.sh first" >&2; exit 1; }
. tests/vm/kernel.sh
KREL=$(ls "$C/k-$ARCH/lib/modules")

# The root filesystem. minbase plus what the scenario and the product use:
# systemd as init, kmod for modprobe (overlay, bridge, veth, netfilter are
# modules of this kernel), iproute2 and iptables (the built-in pod network
# publishes hostPorts with the iptables binary when there is one), procps,
# busybox for wget. No dbus: picolet's cgroup driver is cgroupfs and
# systemctl reaches systemd on its private socket as root.
SUITE=bookworm
PKGS=systemd,systemd-sysv,kmod,iproute2,iptables,procps,busybox
MIRRORS=("deb http://deb.debian.org/debian $SUITE main"
  "deb http://deb.debian.org/debian $SUITE-updates main"
  "deb http://deb.debian.org/debian-security $SUITE-security main")
# Run on the host with the new root as $1. Masked: systemd-firstboot (on a
# first boot it asks for a locale on the console and waits), and what a
# test boot does not need: each unit costs seconds under TCG (a modprobe of
# dm_mod alone 1.5 s of CPU), logind (no dbus) would fail and be retried,
# gettys would print login prompts into the log.
HOOK='set -e
echo vm > "$1/etc/hostname"
echo "127.0.1.1 vm" >> "$1/etc/hosts"
echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" > "$1/etc/fstab"
for u in systemd-firstboot.service systemd-logind.service getty.target serial-getty@.service \
  console-getty.service apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
  e2scrub_all.timer e2scrub_reap.service fstrim.timer systemd-tmpfiles-clean.timer \
  modprobe@dm_mod.service modprobe@loop.service modprobe@fuse.service modprobe@efi_pstore.service; do
  ln -sf /dev/null "$1/etc/systemd/system/$u"
done'
KEY=$(printf '%s\n' "$SUITE" "$ARCH" "$PKGS" "${MIRRORS[@]}" "$HOOK" | sha256sum | cut -c1-16)
ROOTFS="$C/rootfs-$SUITE-$ARCH-$KEY.tar"
W=$(mktemp -d)
qemu=""
trap '[ -z "$qemu" ] || kill "$qemu" 2>/dev/null; rm -rf "$W"' EXIT
t0=$(date +%s)
if [ ! -s "$ROOTFS" ]; then
  echo "vm $ARCH: making the $SUITE root filesystem ($PKGS) with mmdebstrap" >&2
  mmdebstrap --quiet --variant=minbase --architectures="$ARCH" --include="$PKGS" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --customize-hook="$HOOK" "$SUITE" "$W/rootfs.tar" "${MIRRORS[@]}"
  # Other keys' tarballs are what an older package list left.
  rm -f "$C/rootfs-$SUITE-$ARCH-"*.tar
  mv "$W/rootfs.tar" "$ROOTFS"
  echo "vm $ARCH: mmdebstrap took $(( $(date +%s) - t0 )) s" >&2
fi

# The guest disk, made afresh for each run: the cached root filesystem, the
# kernel's modules, the scenario and its inputs.
t1=$(date +%s)
R="$W/root"
mkdir "$R"
tar -C "$R" --numeric-owner -xpf "$ROOTFS"
mkdir -p "$R/usr/lib/modules"
cp -a "$C/k-$ARCH/lib/modules/$KREL" "$R/usr/lib/modules/"
depmod -b "$R" "$KREL"
# mmdebstrap leaves it empty; one per run, as a device has.
tr -d - < /proc/sys/kernel/random/uuid > "$R/etc/machine-id"
V="$R/var/vmtest"
mkdir -p "$V"
cp "$DEB" "$V/"
cp "$BUNDLE" "$V/bundle.tar.gz"
cp "$BIN" "$V/picolet-new"
# The "new build" of an upgrade: the same program with another hash.
printf 'x' >> "$V/picolet-new"
# A build that exits at start: it passes the checks an upgrade makes
# before the swap (version, check) by being the good one, and fails
# anything else, `up` included.
cat > "$V/picolet-broken" <<'SH'
#!/bin/sh
case "$1" in version|check) exec /var/vmtest/picolet-new "$@" ;; esac
echo "picolet-broken: a build that exits at start" >&2
exit 1
SH
chmod 755 "$V/picolet-new" "$V/picolet-broken"
if [ -n "${VM_DEMO_IMAGE:-}" ]; then cp "$VM_DEMO_IMAGE" "$V/busybox.tar"
else BUSYBOX="$BUSYBOX" cargo xtask demo-image "$V/busybox.tar" "$ARCH" >/dev/null; fi
cp examples/manifests/hello.yaml "$V/hello.yaml"
install -m 755 tests/vm/systemd-guest.sh "$V/systemd-guest.sh"
# After multi-user.target: picolet.service (WantedBy=multi-user.target)
# has been started by then, as on a device that booted. Its output goes
# straight to the serial console (no journald in between to lose lines at
# the power cut).
cat > "$R/etc/systemd/system/vmtest.service" <<'UNIT'
[Unit]
Description=picolet VM scenario
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/var/vmtest/systemd-guest.sh
StandardInput=null
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/console
TTYReset=no
TTYVHangup=no
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$R/etc/systemd/system/multi-user.target.wants"
ln -s ../vmtest.service "$R/etc/systemd/system/multi-user.target.wants/vmtest.service"
# At shutdown the containers are left to systemd-shutdown's last kill
# (picolet keeps them in its own cgroups, outside the units): a container
# whose PID 1 ignores SIGTERM (httpd: PID 1 of its namespace, no handler)
# holds the poweroff for the whole stop timeout, 90 s by default.
mkdir -p "$R/etc/systemd/system.conf.d"
printf '[Manager]\nDefaultTimeoutStopSec=10s\n' > "$R/etc/systemd/system.conf.d/vmtest.conf"
# Room for the images, containers and logs the scenario makes.
mb=$(( $(du -sm "$R" | cut -f1) + 1024 ))
truncate -s "${mb}M" "$W/disk.img"
mkfs.ext4 -q -F -L root -d "$R" "$W/disk.img"
rm -rf "$R"

# The initramfs: busybox, the virtio disk's modules (each after what it
# depends on, read from its .modinfo: busybox insmod does not resolve them;
# ext4 is built in), and an init that mounts the disk and hands over.
I="$W/initrd"
mkdir -p "$I"/{bin,dev,proc,sys,lib,newroot}
cp "$BUSYBOX" "$I/bin/busybox"
for a in sh mount umount insmod switch_root sleep cat echo poweroff ls; do ln -s busybox "$I/bin/$a"; done
for m in virtio_pci virtio_blk; do addmod "$I/lib" "$m"; done
echo "$LOAD" > "$I/modules"
cat > "$I/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules); do insmod /lib/$m.ko; done
i=0
until [ -e /dev/vda ]; do i=$((i + 1)); [ $i -gt 100 ] && break; sleep 0.1; done
if ! mount -t ext4 -o rw /dev/vda /newroot; then
  echo "VMTEST FAIL initramfs: cannot mount /dev/vda: $(ls /dev)"
  poweroff -f
fi
read -r u _ < /proc/uptime
echo "VMTEST initramfs: root mounted at $u s, starting systemd"
umount /proc /sys /dev
exec switch_root /newroot /sbin/init
INIT
chmod +x "$I/init"
(cd "$I" && find . | cpio -o -H newc 2>/dev/null | gzip > "$W/initrd.gz")
echo "vm $ARCH: disk image ${mb} MiB and initramfs made in $(( $(date +%s) - t1 )) s" >&2

# One qemu run for every boot: no -no-reboot, so a guest reboot and the
# power cut (sysrq b) start the same kernel and initramfs again on the same
# disk; the guest's last stage powers off and qemu exits. panic=-1 and
# oops=panic: a guest kernel crash reboots into the next boot, where the
# guest script sees a boot it did not ask for and fails.
t2=$(date +%s)
timeout "$TIMEOUT" "${QEMU[@]}" -smp 2 -m 2048 -nic none -kernel "$KERNEL" -initrd "$W/initrd.gz" \
  -drive "file=$W/disk.img,format=raw,if=none,id=d0" -device virtio-blk-pci,drive=d0 \
  -append "console=$CONSOLE rdinit=/init panic=-1 oops=panic quiet loglevel=5 systemd.show_status=error" \
  -nographic < /dev/null > "$W/console.txt" 2>&1 &
qemu=$!
# Boot timings by the host's clock (the guest's runs unsteady under TCG):
# from qemu's start, or from the guest's reboot or power cut, to the
# unit's first line.
timings="" booted=0 reboots=0 since=$t2
while kill -0 "$qemu" 2>/dev/null; do
  sleep 1
  now=$(date +%s)
  r=$(grep -c 'VMTEST reboot into\|VMTEST CUT\|sysrq: Resetting' "$W/console.txt" || true)
  [ "$r" -le "$reboots" ] || { reboots=$r; since=$now; }
  n=$(grep -c 'VMTEST boot [0-9]' "$W/console.txt" || true)
  [ "$n" -le "$booted" ] || { timings="$timings boot $n: unit after $((now - since)) s;"; booted=$n; }
done
rc=0
wait "$qemu" || rc=$?
qemu=""
[ -z "${VM_CONSOLE_OUT:-}" ] || cp "$W/console.txt" "$VM_CONSOLE_OUT"
tr -d '\r' < "$W/console.txt" | grep -o 'VMTEST .*' || true
passed=$(grep -c 'VMTEST ok' "$W/console.txt" || true)
failed=$(grep -c 'VMTEST FAIL' "$W/console.txt" || true)
echo "vm $ARCH systemd:$timings"
echo "vm $ARCH systemd: $passed passed, $failed failed, qemu $(( $(date +%s) - t2 )) s, whole run $(( $(date +%s) - t0 )) s, kernel $KREL, $DEB"
why=""
[ "$rc" = 124 ] && why="qemu still running after $TIMEOUT s (killed)"
[ -z "$why" ] && [ "$rc" != 0 ] && why="qemu exited with $rc"
[ -z "$why" ] && ! grep -q 'VMTEST done' "$W/console.txt" && why="the guest did not reach VMTEST done"
[ -z "$why" ] && [ "$failed" != 0 ] && why="$failed checks failed"
if [ -n "$why" ]; then
  echo "vm $ARCH systemd: FAILED: $why; console tail:" >&2
  tr -d '\r' < "$W/console.txt" | tail -60 >&2
  exit 1
fi
