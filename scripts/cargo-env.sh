# Sourced by setup.sh, demo.sh and test.sh: puts rustup's cargo on PATH when
# it is not. `sudo` resets PATH to secure_path, which hides
# ~/.cargo/bin of the user the scripts run as (root's /root/.cargo/bin), and a
# minimal Debian has no sudo at all: then run the scripts as root.
if ! command -v cargo >/dev/null 2>&1; then
  _home=$(getent passwd "$(id -un)" | cut -d: -f6)
  for _d in "${CARGO_HOME:+$CARGO_HOME/bin}" "${HOME:+$HOME/.cargo/bin}" "$_home/.cargo/bin"; do
    if [ -n "$_d" ] && [ -x "$_d/cargo" ]; then
      export PATH="$_d:$PATH"
      break
    fi
  done
  unset _home _d
fi
if ! command -v cargo >/dev/null 2>&1; then
  {
    echo "picolet: cargo is missing for $(id -un) (looked in PATH and ~$(id -un)/.cargo/bin)."
    echo "Install the Rust toolchain for $(id -un), then run this again:"
    echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal"
    if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != "$(id -un)" ]; then
      echo "(under sudo that is root's toolchain: run it in 'sudo -i'. $SUDO_USER's own is not used:"
      echo " a build as root would leave root-owned files in it.)"
    fi
  } >&2
  exit 1
fi
