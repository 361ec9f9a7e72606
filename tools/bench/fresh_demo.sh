#!/usr/bin/env bash
# Times tools/demo on a fresh Debian 12: a minimal debootstrap chroot (no compiler, no Meson)
# and a clean clone of this repository's HEAD in it; prints the wall and CPU time and the
# phases (apt-get, meson setup, ninja, plan). Needs root, debootstrap and network access to
# deb.debian.org. Usage: tools/bench/fresh_demo.sh WORKDIR (WORKDIR/root is replaced; a copy of
# the bare chroot is kept in WORKDIR/bookworm-minbase.tar for later runs).
set -euo pipefail
work=$(realpath -m "${1:?usage: tools/bench/fresh_demo.sh WORKDIR}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
root=$work/root
mkdir -p "$work"
for m in dev/pts dev proc; do if mountpoint -q "$root/$m"; then umount "$root/$m"; fi; done
if [ ! -f "$work/bookworm-minbase.tar" ]; then
  rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$work/debootstrap.log"
  # A standard Debian 12 install's sources, and no cached packages.
  printf '%s\n' 'deb http://deb.debian.org/debian bookworm main' \
    'deb http://deb.debian.org/debian bookworm-updates main' \
    'deb http://deb.debian.org/debian-security bookworm-security main' >"$root/etc/apt/sources.list"
  rm -f "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -cf "$work/bookworm-minbase.tar" .
fi
rm -rf "$root" && mkdir "$root" && tar -C "$root" -xf "$work/bookworm-minbase.tar"
trap 'for m in dev/pts dev proc; do umount "$root/$m" 2>/dev/null || true; done' EXIT
mount -t proc proc "$root/proc"; mount --bind /dev "$root/dev"; mount --bind /dev/pts "$root/dev/pts"
cp /etc/resolv.conf "$root/etc/resolv.conf"
git clone -q "$repo" "$root/root/autovm"
echo "clone of $(git -C "$root/root/autovm" log --oneline -1); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s.%N)
TIMEFORMAT="tools/demo: %R s wall, %U s user + %S s system CPU"
time chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb \
  /bin/bash -c 'cd /root/autovm && tools/demo' >"$work/demo.out" 2>"$work/demo.err"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); output in $work/demo.out"
t() { echo "$(stat -c %.3Y "$root/$1") - $start" | bc; }
echo "phases (s from the start): packages installed $(date -d "$(sed -n 's/^End-Date: //p' \
  "$root/var/log/apt/history.log" | tail -1)" +%s | xargs -I{} echo "{} - $start" | bc)," \
  "configured $(t root/autovm/build/build.ninja), autovm-plan built" \
  "$(t root/autovm/build/compiler/driver/autovm-plan), autovm-inspect built" \
  "$(t root/autovm/build/tools/inspect/autovm-inspect), plan written $(t root/autovm/build/demo-plan.json)"
