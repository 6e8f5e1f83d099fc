#!/usr/bin/env sh
# Install the system packages onnx_lab needs when they are missing (idempotent).
#   graphviz  -> the `dot` binary used to draw graphs
#   chromium  -> headless browser for the JupyterLab browser test
set -eu
need_graphviz=0
need_chromium=0
for what in "$@"; do
  case "$what" in
    graphviz) command -v dot >/dev/null 2>&1 || need_graphviz=1 ;;
    chromium) [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1 || need_chromium=1 ;;
    *) echo "install-system-deps: unknown package '$what'" >&2; exit 2 ;;
  esac
done
[ "$need_graphviz$need_chromium" = "00" ] && exit 0
pkgs=""
[ "$need_graphviz" = 1 ] && pkgs="$pkgs graphviz"
[ "$need_chromium" = 1 ] && pkgs="$pkgs chromium"
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
if command -v apt-get >/dev/null 2>&1; then
  echo "Installing$pkgs with apt-get ..."
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $pkgs >/dev/null
elif command -v brew >/dev/null 2>&1; then
  [ "$need_graphviz" = 1 ] && brew install graphviz
  [ "$need_chromium" = 1 ] && brew install --cask chromium
else
  echo "Please install the system package(s):$pkgs (graphviz provides the 'dot' binary)." >&2
  echo "onnx_lab still works without them: renderings then show DOT source and tables." >&2
  exit 1
fi
