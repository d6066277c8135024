#!/usr/bin/env bash
# Make a private CA and a SuperLink server certificate for term-fl's deployments.
#
#   deploy/make-certs.sh [OUT_DIR]        (default: deploy/certs beside this script)
#
# Writes OUT_DIR/ca.crt, ca.key, server.pem, server.key (compose secrets of
# docker-compose.yml). The server certificate's subjectAltName covers every
# name the SuperLink is reached by:
#   IP:127.0.0.1     the SuperLink's own SuperExec (ServerApp runner) connects there
#   DNS:localhost    `flwr run` / SuperNodes on the Docker host (published port)
#   DNS:superlink    the compose service name (SuperNodes, submitter)
# More names (a remote SuperLink): EXTRA_SANS="DNS:fl.example.org,IP:10.0.0.5".
# Existing files are kept unless --force is given. Validity: DAYS (default 365).
# Development CA: for production, use certificates of your own PKI.
set -euo pipefail

force=0
out=""
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "make-certs.sh: unknown option $arg" >&2; exit 2 ;;
    *) out="$arg" ;;
  esac
done
out="${out:-$(cd "$(dirname "$0")" && pwd)/certs}"
days="${DAYS:-365}"
sans="IP:127.0.0.1,DNS:localhost,DNS:superlink${EXTRA_SANS:+,$EXTRA_SANS}"

command -v openssl >/dev/null || { echo "make-certs.sh: openssl not found" >&2; exit 1; }
mkdir -p "$out"
if [ -f "$out/server.pem" ] && [ "$force" -eq 0 ]; then
  echo "make-certs.sh: $out/server.pem exists; keeping it (use --force to make new certificates)"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
umask 077

cat > "$tmp/ca.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = term-fl development CA
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF

cat > "$tmp/server.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = superlink
[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = $sans
authorityKeyIdentifier = keyid
subjectKeyIdentifier = hash
EOF

openssl genrsa -out "$out/ca.key" 4096 2>/dev/null
openssl req -x509 -new -key "$out/ca.key" -sha256 -days "$days" \
  -config "$tmp/ca.cnf" -out "$out/ca.crt"

openssl genrsa -out "$out/server.key" 2048 2>/dev/null
openssl req -new -key "$out/server.key" -config "$tmp/server.cnf" -out "$tmp/server.csr"
openssl x509 -req -in "$tmp/server.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 \
  -extfile "$tmp/server.cnf" -extensions v3_server -out "$out/server.pem" 2>/dev/null

# Public parts readable; private keys stay 0600 (see deploy/README.md for the
# container user, uid 49999, that must read server.key).
chmod 0644 "$out/ca.crt" "$out/server.pem"
chmod 0600 "$out/ca.key" "$out/server.key"
openssl verify -CAfile "$out/ca.crt" "$out/server.pem" >/dev/null

echo "make-certs.sh: wrote $out/{ca.crt,ca.key,server.pem,server.key}"
echo "make-certs.sh: server subjectAltName: $sans"
