#!/usr/bin/env bash
# Installs the OTLP receiver's Python dependencies (PyPI `opentelemetry-proto`, the official
# protobuf definitions, and `grpcio`, both pinned) into a virtualenv for the telemetry tests:
# FORGE_OTLP_HOME, default /var/tmp/forge-otlp. Idempotent: a virtualenv without the marker
# written at the end (an interrupted install) is made again.
set -euo pipefail
home="${FORGE_OTLP_HOME:-/var/tmp/forge-otlp}"
proto="1.45.2"
grpc="1.85.3"
marker="$home/.installed-$proto-$grpc"
if [ -f "$marker" ]; then
  echo "opentelemetry-proto $proto and grpcio $grpc are in $home"
  exit 0
fi
rm -rf "$home"
python3 -m venv "$home"
"$home/bin/pip" install --quiet "opentelemetry-proto==$proto" "grpcio==$grpc"
touch "$marker"
echo "opentelemetry-proto $proto and grpcio $grpc are in $home"
