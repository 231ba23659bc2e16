#!/usr/bin/env bash
# Builds volt against LibTorch 2.x on the CPU and runs the whole test suite with it, in a Debian 13
# (trixie) tree made by debootstrap: Debian's LibTorch 2.6 and gcc 14, where the development
# machines and CI have Debian 12's LibTorch 1.13 and gcc 12. It checks the 2.x side of every
# version branch (core/compat.h) before a GPU run, and without one. Needs root and Debian's registry.
# usage: scripts/torch2.sh ROOT [setup] [build] [test] [cuda-syntax]   (default: all of them)
#   ROOT         the trixie tree (made on first use, 3.7 GB with the packages); the repository
#                is mounted inside it at its own path, and the build goes to VOLT_TORCH2_BUILD_DIR
#                (default build-torch2/, git-ignored)
#   setup        debootstrap ROOT and install the packages (skipped for a package already there)
#   build        configure and build everything (Ninja)
#   test         ctest over the whole suite; extra ctest arguments in VOLT_CTEST_ARGS
#   cuda-syntax  compiles the sources that branch on VOLT_WITH_CUDA for syntax and types against
#                Debian's CUDA LibTorch 2.6 headers (libtorch-cuda-dev, contrib) and the CUDA
#                toolkit's headers in VOLT_CUDA_HOME (default /usr/local/cuda); no GPU is needed
# Mounts are undone however the script ends.
set -euo pipefail
root=${1:?usage: scripts/torch2.sh ROOT [setup] [build] [test] [cuda-syntax]}
shift
steps=" ${*:-setup build test cuda-syntax} "
for s in $steps; do
  case $s in setup | build | test | cuda-syntax) ;; *)
    echo "torch2.sh: unknown step '$s' (steps: setup build test cuda-syntax)"
    exit 2
    ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd -P)
root=$(realpath -m "$root")
case $root in
  / | "$repo" | "$repo"/*) echo "torch2.sh: ROOT must be a folder of its own, outside the repository (got $root)"; exit 2 ;;
esac
if [ -n "$(ls -A "$root" 2>/dev/null)" ] && ! grep -qs '^VERSION_CODENAME=trixie$' "$root/etc/os-release"; then
  echo "torch2.sh: $root is neither empty nor a Debian 13 (trixie) tree; give a new folder or one this script made"
  exit 2
fi
if [[ $steps != *" setup "* ]] && ! grep -qs '^VERSION_CODENAME=trixie$' "$root/etc/os-release"; then
  echo "torch2.sh: $root has no trixie tree yet: run the setup step first"
  exit 2
fi
[ "$(id -u)" -eq 0 ] || { echo "torch2.sh: needs root (debootstrap, chroot and mounts)"; exit 2; }
mkdir -p "$root"
cd "$repo"
mirror=${VOLT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cuda_home=${VOLT_CUDA_HOME:-/usr/local/cuda}
bdir=${VOLT_TORCH2_BUILD_DIR:-build-torch2}
extra=$root/opt/volt-extra

# ROOT is bound onto itself first, so that / is a mount point inside it (`ip netns`, which the
# multi-host tests use, remounts / as a slave). At the end everything mounted at or under ROOT is
# undone, also what a run killed with SIGKILL left behind.
cleanup() { ! mountpoint -q "$root" || umount -R -l "$root" 2>/dev/null || true; }
trap cleanup EXIT
bind() {  # bind SRC DEST: DEST inside ROOT
  mkdir -p "$root$2"
  mountpoint -q "$root$2" || mount --bind "$1" "$root$2"
}
mount_root() { mountpoint -q "$root" || mount --bind "$root" "$root"; }
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 bash -c "$1"; }

# debootstrap removes ROOT/debootstrap when it completes.
if [ -d "$root/debootstrap" ]; then
  echo "torch2.sh: $root is an interrupted debootstrap (log: $root.debootstrap.log); remove it and run setup again"
  exit 2
fi

if [[ $steps == *" setup "* ]]; then
  if [ ! -x "$root/usr/bin/apt-get" ]; then
    command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
    echo "torch2.sh: debootstrap trixie into $root"
    debootstrap --variant=minbase --include=ca-certificates trixie "$root" "$mirror" >"$root.debootstrap.log"
  fi
  cp /etc/resolv.conf "$root/etc/resolv.conf"
fi
mount_root
bind /proc /proc
bind /sys /sys
bind /dev /dev
bind "$repo" "$repo"
# The shipped data (../shared/data: WikiText-2), which the demo and CLI tests read beside the repository.
[ -d "$repo/../shared" ] && bind "$(cd "$repo/../shared" && pwd)" "$(cd "$repo/../shared" && pwd)"

if [[ $steps == *" setup "* ]]; then
  # The packages of scripts/install-deps.sh, from trixie; Catch2 is v3 there, so v2 (which the
  # tests are written for) comes from this machine's own registry, unpacked into ROOT/opt.
  pkgs="build-essential cmake ninja-build libtorch-dev libgloo-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
        libcurl4-openssl-dev nlohmann-json3-dev libprotobuf-dev protobuf-compiler pkg-config libsentencepiece-dev
        libxxhash-dev libopenblas0-openmp python3-torch python3-sentencepiece iproute2 procps"
  pkgs=$(echo $pkgs)  # one line
  in_root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null"
  if [ ! -f "$extra/catch2/usr/include/catch2/catch.hpp" ]; then
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download catch2 >/dev/null 2>&1) || { apt-get update -qq && (cd "$tmp" && apt-get download catch2); }
    mkdir -p "$extra/catch2" && dpkg -x "$tmp"/catch2_2*.deb "$extra/catch2"
    rm -rf "$tmp"
  fi
  grep -q "define CATCH_VERSION_MAJOR 2$" "$extra/catch2/usr/include/catch2/catch.hpp" ||
    { echo "torch2.sh: the catch2 in $extra/catch2 is not Catch2 v2"; exit 2; }
  in_root "dpkg-query -W -f='LibTorch \${Version}, ' libtorch-dev; gcc --version | head -1"
fi

if [[ $steps == *" build "* ]]; then
  in_root "cd $repo && cmake -S . -B $bdir -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
             -DCMAKE_PREFIX_PATH=/opt/volt-extra/catch2/usr >/dev/null && ninja -C $bdir -j$(nproc)"
fi

if [[ $steps == *" test "* ]]; then
  in_root "cd $repo && ctest --test-dir $bdir --output-on-failure -j$(nproc) ${VOLT_CTEST_ARGS:-}"
fi

if [[ $steps == *" cuda-syntax "* ]]; then
  [ -f "$cuda_home/include/cuda_runtime.h" ] || { echo "torch2.sh: no CUDA toolkit headers in $cuda_home"; exit 2; }
  [ -f "$cuda_home/include/nccl.h" ] || { echo "torch2.sh: no nccl.h in $cuda_home/include"; exit 2; }
  if [ ! -f "$extra/torch-cuda/usr/include/ATen/cuda/CUDAGraph.h" ]; then
    tmp=$(mktemp -d)
    pool=$(curl -fsS "$mirror/dists/trixie/contrib/binary-amd64/Packages.xz" | xz -d |
      awk '/^Package: libtorch-cuda-dev$/{p=1} p && /^Filename:/ && !f {print $2; f=1}')
    [ -n "$pool" ] || { echo "torch2.sh: libtorch-cuda-dev not found in trixie contrib"; exit 2; }
    curl -fsS -o "$tmp/torch-cuda.deb" "$mirror/$pool"
    mkdir -p "$extra/torch-cuda" && dpkg -x "$tmp/torch-cuda.deb" "$extra/torch-cuda"
    rm -rf "$tmp"
  fi
  bind "$cuda_home" /opt/volt-cuda
  # The sources that branch on VOLT_WITH_CUDA / USE_C10D_NCCL, with the library's own compile
  # commands from the CPU build (so `build` runs first) less its precompiled header (made without
  # CUDA), the CUDA LibTorch's headers ahead of the CPU ones. core/compat.h's inline CUDA code is
  # compiled by every file that includes it; the sources that call it are checked too.
  files=$(grep -rl --include='*.cpp' -e VOLT_WITH_CUDA -e USE_C10D_NCCL core distributed strategies optim trainer)
  files="$(echo $files) strategies/cuda_graphs/graph_recorder.cpp strategies/cuda_graphs/graphed_call.cpp optim/fused_adam.cpp"
  [ -f "$bdir/compile_commands.json" ] || { echo "torch2.sh: run the build step first ($bdir/compile_commands.json)"; exit 2; }
  in_root "cd $repo && python3 - $bdir/compile_commands.json $files" <<'PY'
import json, shlex, subprocess, sys
db = {e["file"]: e for e in json.load(open(sys.argv[1]))}
rc = 0
for f in sys.argv[2:]:
    e = next((v for k, v in db.items() if k.endswith("/" + f)), None)
    if e is None:
        print(f"torch2.sh: {f} is not in the compile commands"); rc = 1; continue
    args, out, skip = shlex.split(e["command"]), [], 0
    for a in args:
        if skip: skip -= 1; continue
        if a in ("-o", "-include"): skip = 1; continue
        if a in ("-c", "-Winvalid-pch") or a.endswith(".o"): continue
        out.append(a)
    cuda_torch = "/opt/volt-extra/torch-cuda/usr/include"
    cmd = [out[0], "-isystem", cuda_torch + "/torch/csrc/api/include", "-isystem", cuda_torch, "-isystem",
           "/opt/volt-cuda/include", "-DVOLT_WITH_CUDA=1", "-DUSE_C10D_NCCL", "-fsyntax-only"] + out[1:]
    print(f"torch2.sh: cuda-syntax {f}", flush=True)
    rc |= subprocess.call(cmd, cwd=e["directory"])
sys.exit(1 if rc else 0)
PY
fi
