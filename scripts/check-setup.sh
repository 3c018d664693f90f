#!/usr/bin/env bash
# Would a fresh machine have everything this build used? Run after
# scripts/dist.sh (CI does). Maps to their Debian packages:
#   - every header the static builds' C compilers read (the -MD .d files that
#     .cargo/config.toml asks for, in the target dir's build outputs),
#   - those compilers and the programs they run (cc1, as),
#   - every program the Rust code and tests start by name (Command::new("…"))
#     and the ones the scripts run (listed below),
# and fails unless each package is one scripts/setup.sh installs, one they
# depend on (Depends/Pre-Depends, recursively: apt runs --no-install-recommends)
# or one every Debian system has (Essential or Priority required). Also checks
# that the rustup targets built are the ones setup.sh adds. The cross
# gcc's libc headers came from a manual install on the CI machine, so CI stayed
# green while a new machine could not build.
set -euo pipefail
cd "$(dirname "$0")/.."
T="${CARGO_TARGET_DIR:-target}"

# Programs the scripts run that no Command::new names.
SCRIPT_PROGRAMS=(protoc readelf qemu-aarch64-static qemu-system-x86_64 qemu-system-aarch64 cpio
  busybox skopeo containerd ctr runc promtool)

fail=0
mapfile -t packages < <(scripts/setup.sh --list-packages)
mapfile -t targets < <(scripts/setup.sh --list-targets)

# What a fresh machine is sure to have, and what setup.sh brings in.
allowed=$(
  {
    dpkg-query -W -f='${Package} ${Essential} ${Priority}\n' | awk '$2 == "yes" || $3 == "required" { print $1 }'
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "${packages[@]}" | grep -v '^ ' | tr -d '<>'
  } | sort -u
)

files=()
# Headers read by the C compilers of the static builds.
dep_files=0
for t in "${targets[@]}"; do
  dir="$T/$t/release/build"
  [ -d "$dir" ] || { echo "check-setup: no build of $t in $dir (run scripts/dist.sh first)" >&2; fail=1; continue; }
  while IFS= read -r -d '' d; do
    dep_files=$((dep_files + 1))
    # make syntax: "obj.o: a.c b.h \" continued over lines; keep absolute paths.
    while IFS= read -r f; do files+=("$f"); done < <(tr -s ' \\\n' '\n' <"$d" | grep '^/' | grep -v ':$')
  done < <(find "$dir" -path '*/out/*' -name '*.d' -print0)
done
if [ "$dep_files" = 0 ]; then
  echo "check-setup: no .d files under $T/*/release/build: is -MD still in .cargo/config.toml?" >&2
  fail=1
fi
# The compilers named in .cargo/config.toml and the programs gcc runs.
for cc in $(sed -n 's/^CC_[a-z0-9_]* *= *"\(.*\)"/\1/p' .cargo/config.toml); do
  path=$(command -v "$cc") || { echo "check-setup: compiler $cc is not installed" >&2; fail=1; continue; }
  files+=("$path")
  for prog in cc1 as; do
    p=$("$cc" -print-prog-name="$prog")
    case "$p" in /*) files+=("$p") ;; *) p=$(command -v "$p") && files+=("$p") ;; esac
  done
done
# Programs started by name.
mapfile -t started < <(grep -rhoE 'Command::new\("[^"/]+"\)' --include='*.rs' . 2>/dev/null |
  sed 's/Command::new("\(.*\)")/\1/' | sort -u)
for prog in "${started[@]}" "${SCRIPT_PROGRAMS[@]}"; do
  path=$(command -v "$prog") || { echo "check-setup: $prog is run but not installed" >&2; fail=1; continue; }
  files+=("$path")
done

# File → package, in one pass over dpkg's file lists. dpkg knows a file by the
# path its package ships, which on a merged-/usr system may be the /lib or /bin
# alias, or a symlink's own path: try the path, its target and both aliases.
declare -A candidates_of
cands=$(mktemp)
trap 'rm -f "$cands"' EXIT
checked=0
for f in $(printf '%s\n' "${files[@]}" | sort -u); do
  case "$f" in
    "$HOME"/.cargo/* | "$HOME"/.rustup/* | "$PWD"/* | "$T"/*) continue ;; # rustup's and ours
  esac
  [ -e "$f" ] || continue # a generated header gone since: no package's
  checked=$((checked + 1))
  real=$(readlink -f "$f")
  c=$(printf '%s\n' "$f" "$real" "${f/#\/usr\//\/}" "${real/#\/usr\//\/}" | sort -u)
  candidates_of[$f]=$c
  printf '%s\n' "$c" >>"$cands"
done
declare -A pkg_of # path -> package ("/var/lib/dpkg/info/PKG[:ARCH].list:PATH")
while IFS= read -r line; do
  list=${line%%.list:*}
  pkg=${list##*/}
  pkg_of[${line#*.list:}]=${pkg%%:*}
done < <(grep -HFx -f "$cands" /var/lib/dpkg/info/*.list)

declare -A seen
for f in "${!candidates_of[@]}"; do
  pkg=
  while IFS= read -r c; do
    [ -n "${pkg_of[$c]:-}" ] && { pkg=${pkg_of[$c]}; break; }
  done <<<"${candidates_of[$f]}"
  if [ -z "$pkg" ]; then
    echo "check-setup: $f belongs to no Debian package: installed by hand?" >&2
    fail=1
    continue
  fi
  [ -n "${seen[$pkg]:-}" ] && continue
  seen[$pkg]=1
  if ! grep -qx "$pkg" <<<"$allowed"; then
    echo "check-setup: $f comes from $pkg, which scripts/setup.sh does not install (nor anything it depends on)" >&2
    fail=1
  fi
done

# Rustup targets: every musl target with build output must be one setup.sh adds.
for d in "$T"/*-unknown-linux-*/; do
  [ -d "$d" ] || continue
  t=$(basename "$d")
  grep -qx "$t" < <(printf '%s\n' "${targets[@]}") ||
    { echo "check-setup: $t was built but scripts/setup.sh does not add that rustup target" >&2; fail=1; }
done

if [ "$fail" != 0 ]; then
  echo "check-setup: FAILED — add the packages above to PACKAGES in scripts/setup.sh" >&2
  exit 1
fi
echo "check-setup: ok — $checked files from ${#seen[@]} packages, all installed by scripts/setup.sh or part of every Debian system ($dep_files .d files)"
