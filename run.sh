#!/usr/bin/env bash
# shardstream's two quick-start commands. Each sets up ./.venv itself (idempotent), then runs.
#
#   bash run.sh demo    make a small dataset, start a local S3 server, stream it, print throughput
#   bash run.sh test    run the whole test suite
#
# torch is installed first and pinned (torch==2.13.0) so that nothing resolves a multi-GB CUDA
# build by surprise; the package and its extras are installed after it.
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
VENV=.venv
TORCH_SPEC="torch==2.13.0"

setup() {
    if [ ! -x "$VENV/bin/python" ]; then
        echo "[setup] creating $VENV with $($PY --version)"
        "$PY" -m venv "$VENV"
    fi
    local stamp="$VENV/.shardstream-installed"
    local want
    want="$(cat pyproject.toml run.sh | sha256sum | cut -c1-16)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    echo "[setup] installing $TORCH_SPEC, then shardstream[dev] (editable)"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q "$TORCH_SPEC"
    "$VENV/bin/python" -m pip install -q -e ".[dev]"
    echo "$want" > "$stamp"
}

cmd=${1:-}
shift || true
case "$cmd" in
    demo)
        setup
        exec "$VENV/bin/shardstream" demo "$@"
        ;;
    test)
        setup
        # The whole suite, slow stress tests included (a plain `pytest` deselects them).
        # pytest exit code 5 means "no tests collected": a failure for us.
        exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m "slow or not slow" "$@"
        ;;
    setup)
        setup
        ;;
    *)
        echo "usage: bash run.sh demo|test|setup [args...]" >&2
        exit 2
        ;;
esac
