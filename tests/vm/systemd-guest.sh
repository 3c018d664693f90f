#!/bin/bash
# The guest half of tests/vm/systemd.sh: run as root by vmtest.service
# (oneshot, after multi-user.target) at every boot of the Debian guest, its
# output on the serial console. The stage in /var/vmtest/stage (on the
# guest disk, so it outlives reboots and the power cut) says which boot
# this is:
#   1: install the .deb; the service is enabled and running; the demo
#      image and pod go in place; reboot.
#   2: the pod serves at boot; `systemctl restart` and a kill -9 of the
#      service keep its containers; `picolet upgrade` to a new build, to a
#      broken one (rolled back), and once more to the broken one with the
#      power cut right after the swap.
#   3: after the cut the node serves again on the good binary; `dpkg -P`
#      leaves nothing; `picolet install --bundle` from the airgap bundle
#      runs the demo pod from the bundle's image; `picolet uninstall`
#      leaves nothing.
# Every wait is bounded and fails its check with what was seen.
set -uo pipefail
V=/var/vmtest
STAGE="$V/stage"
stage=$(cat "$STAGE" 2>/dev/null || echo 1)
boots=$(( $(cat "$V/boots" 2>/dev/null || echo 0) + 1 ))
echo "$boots" > "$V/boots"
sync
failed=0
ok() { echo "VMTEST ok $*"; }
fail() { echo "VMTEST FAIL $1: $2"; failed=1; }
up() { cut -d. -f1 /proc/uptime; }
echo "VMTEST boot $boots, stage $stage: unit started at $(cut -d' ' -f1 /proc/uptime) s"
# One stage's checks and every later one in a boot cannot take longer than
# this; a hang ends the run with a FAIL instead of waiting for the host's
# timeout.
( sleep 420
  echo "VMTEST FAIL watchdog: stage $stage not done after 420 s"
  journalctl -b --no-pager -n 40 | sed 's/^/VMTEST journal /'
  poweroff -f ) &
# A boot nobody asked for (a kernel crash resets the guest too) ends the
# run: the stage would otherwise run twice.
[ "$boots" -le 3 ] || stage="$stage, boot $boots: more boots than stages"

# wait_for SECONDS COMMAND...: true once COMMAND is, false at the deadline.
wait_for() {
  local end=$(( $(up) + $1 )); shift
  until "$@"; do [ "$(up)" -ge "$end" ] && return 1; sleep 1; done
}
page=""
serves() {
  # (busybox 1.35's wget -T crashes on a refused connection: timeout(1)
  # bounds it instead.)
  page=$(timeout 10 busybox wget -q -O- http://127.0.0.1:8080/ 2>&1)
  case "$page" in *"hello from hello"*) return 0 ;; esac
  return 1
}
active() { [ "$(systemctl is-active picolet)" = active ]; }
# The running containers' IDs, sorted, one line.
ids() { timeout 20 picolet ctl ps 2>/dev/null | awk 'NR > 1 { print $1 }' | sort | tr '\n' ' '; }
same_ids() { [ "$(ids)" = "$ids0" ]; }
hash() { sha256sum "$1" | cut -d' ' -f1; }
# What picolet said lately, for a failed check.
diag() {
  systemctl status --no-pager picolet 2>&1 | sed 's/^/VMTEST status /'
  journalctl -u picolet -b --no-pager -n 30 2>&1 | sed 's/^/VMTEST journal /'
  timeout 20 picolet ctl ps -a 2>&1 | sed 's/^/VMTEST ps /'
  { ip -br addr; iptables -t nat -S; } 2>&1 | sed 's/^/VMTEST net /'
}
# left_nothing CHECK LOG PATHS...: no container, process, state, network,
# cgroup, mount or config of picolet is left, nor any of PATHS.
left_nothing() {
  local check=$1 log=$2 left="" p
  shift 2
  pgrep -x httpd >/dev/null && left="$left httpd"
  pgrep -f 'picolet (up|shim|agent|monitor)' >/dev/null && left="$left picolet-processes"
  for p in "$@" /etc/picolet /var/lib/picolet /run/picolet /etc/cni/net.d/10-picolet.conflist \
    /sys/class/net/picolet0 /sys/fs/cgroup/kubepods; do
    [ -e "$p" ] && left="$left $p"
  done
  ls /var/log/pods 2>/dev/null | grep -q . && left="$left /var/log/pods/$(ls /var/log/pods | head -1)"
  iptables -t nat -S 2>/dev/null | grep -q PICOLET && left="$left PICOLET-chains"
  grep -q ' /var/lib/picolet\| /run/picolet' /proc/self/mountinfo && left="$left mounts"
  if [ -z "$left" ]; then ok "$check"; else fail "$check" "$left"; sed 's/^/VMTEST log /' "$log"; fi
}
check_serves() {
  if wait_for "$2" serves; then ok "$1 (at $(up) s)"; else fail "$1" "no page in $2 s: $page"; diag; fi
}
next_boot() {
  echo "$1" > "$STAGE"
  sync
  echo "VMTEST reboot into stage $1"
  # The target itself: `systemctl reboot` asks logind first, and the
  # guest has no dbus.
  systemctl --no-block --job-mode=replace-irreversibly start reboot.target
  exit 0
}
finish() {
  echo "VMTEST done"
  echo end > "$STAGE"
  sync
  systemctl --no-block --job-mode=replace-irreversibly start poweroff.target
  exit 0
}

case "$stage" in
1)
  echo 1 > /proc/sys/kernel/sysrq
  if dpkg -i "$V"/picolet_*.deb > /run/dpkg.txt 2>&1; then ok dpkg-install; else fail dpkg-install "$(cat /run/dpkg.txt)"; fi
  s=$(systemctl is-enabled picolet 2>&1)
  [ "$s" = enabled ] && ok service-enabled || fail service-enabled "$s"
  if wait_for 30 active; then ok service-active; else fail service-active "$(systemctl is-active picolet)"; diag; fi
  # In place whole (a rename on the same disk) for picolet to find at its
  # next start: it imports every archive in images/ then.
  mkdir -p /var/lib/picolet/images /etc/picolet/manifests
  cp "$V/busybox.tar" /var/lib/picolet/images/.busybox.tar.part
  mv /var/lib/picolet/images/.busybox.tar.part /var/lib/picolet/images/busybox.tar
  cp "$V/hello.yaml" /etc/picolet/manifests/.hello.yaml.part
  mv /etc/picolet/manifests/.hello.yaml.part /etc/picolet/manifests/hello.yaml
  [ "$failed" = 0 ] || { echo "VMTEST abort: stage 1 failed"; finish; }
  next_boot 2
  ;;
2)
  check_serves served-at-boot 120
  ids0=$(ids)
  [ -n "$ids0" ] && ok "containers-running ($ids0)" || fail containers-running "none"
  [ "$failed" = 0 ] || { echo "VMTEST abort: the pod did not come up"; finish; }

  # A restart stops only `picolet up` (KillMode=process): the containers
  # stay, the new one adopts them.
  systemctl restart picolet
  if wait_for 30 active; then ok restart-active; else fail restart-active "$(systemctl is-active picolet)"; diag; fi
  if wait_for 60 same_ids; then ok restart-kept-containers; else fail restart-kept-containers "$ids0 -> $(ids)"; diag; fi
  check_serves served-after-restart 60
  # A container restarted would be a new ID; an exited httpd would be one
  # that was restarted and cleaned up.
  ex=$(timeout 20 picolet ctl ps -a 2>/dev/null | awk '$0 ~ /Exited/ && $0 ~ /httpd/')
  [ -z "$ex" ] && ok restart-no-container-restart || fail restart-no-container-restart "$ex"

  # kill -9 of the service's main process: systemd restarts it
  # (Restart=always), the containers stay.
  n0=$(systemctl show -p NRestarts --value picolet)
  pid=$(systemctl show -p MainPID --value picolet)
  kill -9 "$pid"
  restarted() { [ "$(systemctl show -p NRestarts --value picolet)" -gt "$n0" ] && active \
    && [ "$(systemctl show -p MainPID --value picolet)" != "$pid" ]; }
  if wait_for 30 restarted; then ok "kill9-restarted-by-systemd (NRestarts $n0 -> $(systemctl show -p NRestarts --value picolet))"
  else fail kill9-restarted-by-systemd "NRestarts $(systemctl show -p NRestarts --value picolet), $(systemctl is-active picolet)"; diag; fi
  if wait_for 60 same_ids; then ok kill9-kept-containers; else fail kill9-kept-containers "$ids0 -> $(ids)"; diag; fi
  check_serves served-after-kill9 60

  if ! picolet upgrade --help >/dev/null 2>&1; then
    echo "VMTEST skip upgrade: not built"
    finish
  fi
  new="$V/picolet-new"; broken="$V/picolet-broken"
  hnew=$(hash "$new")
  # To a new build: swapped, the service runs it, the containers stay.
  if picolet upgrade "$new" > /run/upgrade.txt 2>&1; then ok upgrade-exit-0; else fail upgrade-exit-0 "$(cat /run/upgrade.txt)"; fi
  h=$(hash /usr/bin/picolet)
  [ "$h" = "$hnew" ] && ok upgrade-swapped || fail upgrade-swapped "/usr/bin/picolet is $h, the new build $hnew"
  if wait_for 30 active; then ok upgrade-active; else fail upgrade-active "$(systemctl is-active picolet)"; diag; fi
  if wait_for 60 same_ids; then ok upgrade-kept-containers; else fail upgrade-kept-containers "$ids0 -> $(ids)"; diag; fi
  check_serves served-after-upgrade 60
  # To a build that exits at start: the good one back. systemd counts
  # its restarts, so the upgrade gives up after two exits rather than at
  # its 120 s deadline.
  t0=$(up)
  if picolet upgrade "$broken" > /run/upgrade.txt 2>&1; then fail upgrade-broken-refused "exit 0: $(cat /run/upgrade.txt)"
  else ok "upgrade-broken-refused in $(( $(up) - t0 )) s ($(tail -1 /run/upgrade.txt))"; fi
  grep -q "exited 2 times" /run/upgrade.txt && ok upgrade-broken-early || fail upgrade-broken-early "$(cat /run/upgrade.txt)"
  h=$(hash /usr/bin/picolet)
  [ "$h" = "$hnew" ] && ok upgrade-rolled-back || fail upgrade-rolled-back "/usr/bin/picolet is $h, the good build $hnew"
  if wait_for 30 active; then ok rollback-active; else fail rollback-active "$(systemctl is-active picolet)"; diag; fi
  if wait_for 60 same_ids; then ok rollback-kept-containers; else fail rollback-kept-containers "$ids0 -> $(ids)"; diag; fi
  check_serves served-after-rollback 60
  if journalctl -u picolet -b --no-pager | grep -q 'rolled back to sha256:'; then ok rollback-in-journal
  else fail rollback-in-journal "no rollback in the unit's journal"; diag; fi
  event() { timeout 20 picolet ctl api /events 2>/dev/null | grep -q UpgradeRolledBack; }
  if wait_for 30 event; then ok rollback-event; else fail rollback-event "no UpgradeRolledBack in /events"; fi

  # The power cut right after the swap to the broken build: no sync, no
  # unmount, the upgrade's own check never finishes. The start guard must
  # bring the good build back at the next boot.
  echo 1 > /proc/sys/kernel/sysrq
  echo 3 > "$STAGE"
  sync
  picolet upgrade "$broken" --timeout 30 > "$V/upgrade-cut.txt" 2>&1 &
  if wait_for 60 cmp -s /usr/bin/picolet "$broken"; then
    echo "VMTEST CUT (at $(up) s)"
    # Let the serial console send that line before the reset.
    sleep 0.5
    echo b > /proc/sysrq-trigger
  fi
  fail upgrade-cut-swap "/usr/bin/picolet never became the broken build in 60 s: $(cat "$V/upgrade-cut.txt")"
  finish
  ;;
3)
  check_serves served-after-cut 180
  h=$(hash /usr/bin/picolet)
  [ "$h" = "$(hash "$V/picolet-new")" ] && ok "binary-good-after-cut ($(/usr/bin/picolet version 2>&1 | head -1))" \
    || fail binary-good-after-cut "/usr/bin/picolet is $h: $(head -c 200 /usr/bin/picolet | tr -c '[:print:]\n' .)"
  if wait_for 30 active; then ok active-after-cut; else fail active-after-cut "$(systemctl is-active picolet)"; diag; fi
  no_marker() { [ ! -e /var/lib/picolet/upgrade.json ]; }
  if wait_for 60 no_marker; then ok upgrade-marker-gone; else fail upgrade-marker-gone "$(cat /var/lib/picolet/upgrade.json)"; fi
  journalctl -b -u picolet --no-pager 2>/dev/null | grep -i 'roll.*back\|rollback\|upgrade' | tail -5 | sed 's/^/VMTEST journal /'

  # Purging the package leaves nothing of picolet.
  if dpkg -P picolet > /run/dpkg.txt 2>&1; then ok dpkg-purge; else fail dpkg-purge "$(cat /run/dpkg.txt)"; fi
  left_nothing purge-left-nothing /run/dpkg.txt /usr/bin/picolet /usr/bin/picolet.prev

  # The airgap bundle, offline: the binary, the unit, the image preloaded.
  rm -rf /run/bundle && mkdir /run/bundle && tar -C /run/bundle -xzf "$V/bundle.tar.gz"
  if /run/bundle/picolet-*/picolet install --bundle "$V/bundle.tar.gz" > /run/install.txt 2>&1; then ok bundle-install
  else fail bundle-install "$(cat /run/install.txt)"; fi
  [ -x /usr/local/bin/picolet ] && [ -f /var/lib/picolet/images/busybox.tar ] \
    && [ "$(systemctl is-enabled picolet 2>&1)" = enabled ] && ok bundle-installed-enabled \
    || fail bundle-installed-enabled "$(ls -l /usr/local/bin/picolet /var/lib/picolet/images 2>&1; systemctl is-enabled picolet 2>&1)"
  if wait_for 30 active; then ok bundle-service-active; else fail bundle-service-active "$(systemctl is-active picolet)"; diag; fi
  cp /usr/local/share/picolet/examples/manifests/hello.yaml /etc/picolet/manifests/hello.yaml
  check_serves served-from-bundle 120
  if /usr/local/bin/picolet uninstall > /run/uninstall.txt 2>&1; then ok uninstall; else fail uninstall "$(cat /run/uninstall.txt)"; fi
  left_nothing uninstall-left-nothing /run/uninstall.txt /usr/local/bin/picolet /usr/local/share/picolet \
    /etc/systemd/system/picolet.service
  finish
  ;;
*)
  echo "VMTEST FAIL stage: boot $boots in stage '$stage'"
  systemctl --no-block --job-mode=replace-irreversibly start poweroff.target
  ;;
esac
