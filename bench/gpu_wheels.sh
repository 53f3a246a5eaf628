#!/usr/bin/env bash
# Fills .whl/a and .whl/b (git-ignored) with what a bare GPU machine lacks for `bench/gpu_lease.sh`, as cp312
# wheels: gymnasium, tyro, rsl_rl (with tensordict) and nvidia-ml-py (NVML, the profile's busy share) in a;
# MuJoCo, MuJoCo Warp, MinAtar and ale-py in b. warp-lang's wheel is 150 MB, over one call's 64 MiB, so it is
# repacked: its Python side as b/warp_py.tar.xz (without the CPU compiler library, examples and tests, which a GPU
# run does not load) and its 300 MB library xz-compressed (78 MB) and split, part 0 in a and part 1 in b. Call 1
# carries .whl/a, call 2 (on the still-warm machine) .whl/b.
#
#   bash bench/gpu_wheels.sh            # about 4 minutes (xz -9 on two cores)
set -eu
cd "$(dirname "$0")/.."
DL=${DL:-/tmp/gpu_wheels_dl}
A_PART_MB=${A_PART_MB:-52}
mkdir -p "$DL"
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
rm -rf .whl/a .whl/b && mkdir -p .whl/a .whl/b
PLAT=""
for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do PLAT="$PLAT --platform $p"; done
A="gymnasium==1.4.0 farama-notifications==0.0.6 tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1
   rsl-rl-lib==5.5.1 tensordict==0.15.3 pyvers==0.2.3 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3
   nvidia-ml-py==13.615.71"
B="mujoco==4.0.0 mujoco-core==4.0.0 glfw==2.11.0 pyopengl==3.1.10 mujoco-warp==4.0.0 minatar==1.0.15
   ale-py==0.12.1"
for set in A B; do
  dir=.whl/$(echo $set | tr AB ab)
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d "$dir" ${!set}
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d "$DL" warp-lang==1.19.0
tmp=$(mktemp -d)
(cd "$tmp" && python3 -m zipfile -e "$DL"/warp_lang-1.19.0-*.whl .)
tar -C "$tmp" -cJf .whl/b/warp_py.tar.xz --exclude=warp/bin/warp.so --exclude=warp/bin/warp-clang.so \
  --exclude=warp/examples --exclude=warp/tests warp warp_lang-1.19.0.dist-info
xz -9 -T0 -c "$tmp/warp/bin/warp.so" > "$tmp/warp.so.xz"
split -b "${A_PART_MB}M" -d "$tmp/warp.so.xz" "$tmp/warp.so.xz.part-"
mv "$tmp/warp.so.xz.part-00" .whl/a/ && mv "$tmp/warp.so.xz.part-01" .whl/b/
sha256sum < "$tmp/warp.so.xz" | cut -d' ' -f1 | tee .whl/a/warp.so.xz.sha256 > .whl/b/warp.so.xz.sha256
rm -rf "$tmp"
# .whl/c: what the host-MuJoCo stages (offpolicy-update, offpolicy-gpu) need, in one call without MuJoCo Warp
rm -rf .whl/c && mkdir -p .whl/c
for w in gymnasium farama_notifications tyro docstring_parser typeguard nvidia_ml_py; do cp .whl/a/"$w"-*.whl .whl/c/; done
for w in mujoco- mujoco_core glfw pyopengl; do cp .whl/b/"$w"*.whl .whl/c/; done
du -sh .whl/a .whl/b .whl/c
