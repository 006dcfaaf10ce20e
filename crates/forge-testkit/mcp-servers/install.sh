#!/usr/bin/env bash
# Installs the real MCP servers the forge-mcp tests use, once: two published versions of
# @modelcontextprotocol/server-everything from npm (exact versions in package-lock.json) and
# mcp-server-time from PyPI in a virtual environment. Idempotent; `.ci/run` and the tests call it.
set -euo pipefail
cd "$(dirname "$0")"
command -v npm >/dev/null || { echo "npm is missing: install Node.js 20 (apt install nodejs npm)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is missing: apt install python3 python3-venv" >&2; exit 1; }
if [ ! -f node_modules/.installed ] || [ package-lock.json -nt node_modules/.installed ]; then
  npm ci --no-audit --no-fund --loglevel=error
  touch node_modules/.installed
fi
if [ ! -f .venv/.installed ] || [ requirements.txt -nt .venv/.installed ]; then
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  touch .venv/.installed
fi
