#!/usr/bin/env bash
# The project's one test command: what the README calls "run all tests" and what CI runs.
# Installs missing system packages (idempotent), then runs every test of the workspace.
# Extra arguments are passed to `cargo test` (e.g. `scripts/test.sh -p bmoe-telemetry`).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

# --no-fail-fast: one failing test binary must not hide the results of the ones after it.
if [ $# -eq 0 ]; then
  set -- --workspace --no-fail-fast
fi
exec cargo test --locked "$@"
