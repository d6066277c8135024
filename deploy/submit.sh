#!/bin/sh
# One-shot submitter of the compose deployments (also used by the local test).
#
# Waits until the SuperLink accepts TCP connections, writes the SuperLink
# connection into $FLWR_HOME/config.toml, then runs the given command,
# normally `flwr run APP CONNECTION --stream --run-config '...'`.
#
# Environment:
#   TERM_FL_SUPERLINK_ADDRESS   host:port of the SuperLink (required)
#   TERM_FL_CONNECTION          connection name (default: compose)
#   TERM_FL_ROOT_CERTIFICATES   ABSOLUTE path of the CA certificate (TLS; flwr refuses relative paths)
#   TERM_FL_INSECURE=1          plaintext instead (docker-compose.dev.yml only)
#   TERM_FL_WAIT_TIMEOUT        seconds to wait for the SuperLink (default 120)
#   FLWR_HOME                   Flower's config folder (default: $HOME/.flwr)
set -eu

address="${TERM_FL_SUPERLINK_ADDRESS:?set TERM_FL_SUPERLINK_ADDRESS=host:port}"
connection="${TERM_FL_CONNECTION:-compose}"
wait_timeout="${TERM_FL_WAIT_TIMEOUT:-120}"
FLWR_HOME="${FLWR_HOME:-$HOME/.flwr}"
export FLWR_HOME
marker="# written by term-fl deploy/submit.sh"

if [ "$#" -eq 0 ]; then
  echo "usage: $0 flwr run APP $connection --stream [--run-config '...']" >&2
  exit 2
fi

if [ "${TERM_FL_INSECURE:-0}" = "1" ]; then
  tls_line="insecure = true"
else
  cert="${TERM_FL_ROOT_CERTIFICATES:?set TERM_FL_ROOT_CERTIFICATES=/absolute/path/ca.crt (or TERM_FL_INSECURE=1 for development)}"
  case "$cert" in
    /*) ;;
    *) echo "submit.sh: TERM_FL_ROOT_CERTIFICATES must be an absolute path (got $cert)" >&2; exit 2 ;;
  esac
  if [ ! -r "$cert" ]; then
    echo "submit.sh: cannot read the CA certificate $cert (run deploy/make-certs.sh)" >&2
    exit 2
  fi
  tls_line="root-certificates = \"$cert\""
fi

mkdir -p "$FLWR_HOME"
config="$FLWR_HOME/config.toml"
if [ -f "$config" ] && ! grep -qF "$marker" "$config"; then
  echo "submit.sh: $config exists and was not written by this script; use another FLWR_HOME" >&2
  exit 2
fi
cat > "$config" <<EOF
$marker
[superlink]
default = "$connection"

[superlink.$connection]
address = "$address"
$tls_line
EOF

python3 - "$address" "$wait_timeout" <<'EOF'
import socket, sys, time
host, _, port = sys.argv[1].rpartition(":")
deadline = time.monotonic() + float(sys.argv[2])
while True:
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"submit.sh: SuperLink {sys.argv[1]} not reachable after {sys.argv[2]} s: {exc}")
        time.sleep(1)
print(f"submit.sh: SuperLink {sys.argv[1]} is up", flush=True)
EOF

exec "$@"
