#!/usr/bin/env sh
# Start JupyterLab on the repository with a notebook open (what `make lab` runs).
#   sh scripts/lab.sh JUPYTER [PORT] [NOTEBOOK]
# JUPYTER is the `jupyter` executable (the venv's); PORT defaults to 8888, NOTEBOOK to
# notebooks/01_explore.ipynb (relative to the repository). The server's root is the repository,
# so the printed URL's path (/lab/tree/NOTEBOOK) names the notebook from there. On a machine
# without a display (no $DISPLAY/$WAYLAND_DISPLAY, not macOS) it starts with --no-browser and
# prints the URL to open from elsewhere.
set -eu
jupyter=$1
port=${2:-8888}
notebook=${3:-notebooks/01_explore.ipynb}
root=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$root/$notebook" ] || { echo "lab: no notebook $root/$notebook" >&2; exit 2; }
token=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
nobrowser=""
if [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ "$(uname)" != Darwin ]; then
  nobrowser=--no-browser
  echo "No display here: open this URL in a browser (ssh -L $port:localhost:$port from another machine)."
fi
allowroot=""
[ "$(id -u)" = 0 ] && allowroot=--allow-root
echo "onnx_lab: http://127.0.0.1:$port/lab/tree/$notebook?token=$token"
cd "$root"
exec "$jupyter" lab $allowroot $nobrowser --port="$port" --ServerApp.port_retries=0 \
  --IdentityProvider.token="$token" --ServerApp.root_dir="$root" \
  --ServerApp.default_url="/lab/tree/$notebook"
