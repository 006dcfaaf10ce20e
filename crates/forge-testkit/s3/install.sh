#!/usr/bin/env bash
# Installs moto's S3-compatible server (PyPI `moto[server]`, pinned) into a virtualenv for the
# tests of forge-files-s3: FORGE_MOTO_HOME, default /var/tmp/forge-moto. Idempotent: a virtualenv
# without the marker written at the end (an interrupted install) is made again.
set -euo pipefail
home="${FORGE_MOTO_HOME:-/var/tmp/forge-moto}"
version="5.1.18"
if [ -f "$home/.installed-$version" ]; then
  echo "moto $version is in $home"
  exit 0
fi
rm -rf "$home"
python3 -m venv "$home"
"$home/bin/pip" install --quiet "moto[server]==$version"
touch "$home/.installed-$version"
echo "moto $version is in $home"
