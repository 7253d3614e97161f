#!/usr/bin/env bash
# Installs the system packages gpupool uses when they are missing and we may: as root with apt.
#   install-system-deps.sh serve  -> bubblewrap (every job runs in its sandbox), passt (pasta:
#                                    egress for each job's own network namespace), nftables
#                                    (nft: the node's fence for jobs over several nodes),
#                                    skopeo and umoci (container images: fetch, rootless unpack)
#   install-system-deps.sh test   -> the same, PostgreSQL, Debian's chromium, Open MPI (mpirun,
#                                    for the MPI example; mpi4py's wheel loads its libmpi),
#                                    docker-registry and busybox-static (the images' tests run a
#                                    registry on 127.0.0.1 holding images they build)
# Elsewhere it says what is missing: the server then refuses to run jobs until bubblewrap is
# there (or GPUPOOL_ISOLATION=off), and the tests that need the others skip.
set -euo pipefail

want="${1:-test}"
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v pasta >/dev/null 2>&1 || missing+=(passt)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
command -v umoci >/dev/null 2>&1 || missing+=(umoci)
if [ "$want" = test ]; then
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
  [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
  [ -x /bin/busybox ] || missing+=(busybox-static)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "note: ${missing[*]} missing and cannot be installed here (needs root and apt);" \
       "install them with your package manager (jobs need bubblewrap; without it the server" \
       "runs no job unless GPUPOOL_ISOLATION=off)" >&2
  exit 0
fi
echo "installing ${missing[*]} from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The tests start their own private PostgreSQL on 127.0.0.1; the packaged cluster is not needed.
if command -v pg_ctlcluster >/dev/null; then
  pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}' | while read -r version name; do
    pg_ctlcluster "$version" "$name" stop 2>/dev/null || true
  done
fi
