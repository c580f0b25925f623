#!/bin/bash
# PID 1 of the container's namespaces (started by outer.sh): build a root and exec systemd.
#
# The root is an overlay of the host's / with a tmpfs on top: the host's files (including
# the project's virtualenv, at the same path) are visible, and nothing the container
# writes reaches the host's disk. WORKDIR/share is bind-mounted read-write at the same
# path inside, for handing files in (releases, configs) and out.
set -eu
work=$1

# Nothing mounted from here on may propagate to the host.
mount --make-rprivate /

mkdir -p "$work/t"
mount -t tmpfs -o mode=755 tmpfs "$work/t"
mkdir -p "$work/t/upper" "$work/t/work" "$work/t/root"
mount -t overlay overlay \
    -o "lowerdir=/,upperdir=$work/t/upper,workdir=$work/t/work" "$work/t/root"
root=$work/t/root

mkdir -p "$work/share" "$root$work/share"
mount --bind "$work/share" "$root$work/share"

mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
# Mounting cgroup2 here (inside the new cgroup namespace, so its root is outer.sh's cgroup)
# makes systemd run in unified mode, inside that cgroup only. Without it systemd would
# choose hybrid mode and create directories in the host's v1 hierarchies.
mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"

# No login prompt on the (fake) console.
ln -sf /dev/null "$root/etc/systemd/system/console-getty.service"
# Debian empties /tmp at boot (tmpfiles "D /tmp"): keep the host's /tmp visible, since the
# project under test (and its virtualenv) may live there.
mkdir -p "$root/etc/tmpfiles.d"
printf 'd /tmp 1777 root root -\n' > "$root/etc/tmpfiles.d/tmp.conf"

# A minimal /dev: a few character devices bound from the host, private pts and shm.
mount -t tmpfs -o mode=755 tmpfs "$root/dev"
for n in null zero full random urandom tty; do
    touch "$root/dev/$n"
    mount --bind "/dev/$n" "$root/dev/$n"
done
mkdir -p "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs tmpfs "$root/dev/shm"
# systemd's console output goes to WORKDIR/console.log (read it when a boot fails).
touch "$work/console.log" "$root/dev/console"
mount --bind "$work/console.log" "$root/dev/console"

mount -t tmpfs -o mode=755 tmpfs "$root/run"

# Make the overlay the root and forget the host's.
cd "$root"
mkdir -p oldroot
pivot_root . oldroot
umount -l /oldroot
rmdir /oldroot || true

# `container=` tells systemd it runs in a container (no hardware units, no getty).
exec env -i container=tenure-test TERM=dumb /usr/lib/systemd/systemd --system
