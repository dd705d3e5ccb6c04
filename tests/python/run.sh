#!/usr/bin/env bash
# run.sh VENV [pytest args] — the Python package's test suite (CTest's python_pytest): creates VENV with Debian's
# interpreter and system site packages (Debian's NumPy, PyTorch and pytest: scripts/deps.sh test installs them) when
# missing, installs python/ into it offline (editable, no index, no build isolation), then runs pytest on
# tests/python. pytest's status is this script's: a failure fails the test, and a skip fails it too (-rs and the
# conftest's check), since a test that skips cannot fail.
set -euo pipefail
venv=$1
shift
root="$(cd "$(dirname "$0")/../.." && pwd)"
py=/usr/bin/python3
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/pip" show -q tokroute >/dev/null 2>&1; then
  "$venv/bin/pip" install --quiet --no-index --no-build-isolation --no-deps -e "$root/python" >/dev/null
fi
cd "$root"
exec "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests/python "$@"
