#!/bin/bash
# Boot a throwaway systemd for the system tests (root only).
#
#   outer.sh WORKDIR
#
# WORKDIR is an empty directory owned by the caller. This script
#   1. puts itself into a fresh cgroup on the host's cgroup2 hierarchy, so everything the
#      container ever runs can be found (and killed) through one directory, whose name it
#      writes to WORKDIR/cgroup-name;
#   2. becomes `unshare`, which forks inner.sh as PID 1 of new pid, mount, network, uts,
#      ipc and cgroup namespaces. inner.sh builds the root and execs systemd.
# The caller finds the container's PID 1 as the only child of this process, enters it with
# `nsenter -t PID -m -p -n -u -i`, stops it with `systemctl poweroff`, and afterwards
# removes the cgroup directory (empty once every process is gone).
set -eu
work=$(realpath "$1")
here=$(dirname "$(realpath "$0")")

# The host's cgroup2 hierarchy: /sys/fs/cgroup itself on a pure-v2 host, the "unified"
# mount on a hybrid one (this project's machines).
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
    cgroot=/sys/fs/cgroup
else
    cgroot=/sys/fs/cgroup/unified
fi
name=tenure-systest-$$
mkdir "$cgroot/$name"
echo $$ > "$cgroot/$name/cgroup.procs"
echo "$cgroot/$name" > "$work/cgroup-name"

# --fork: PID 1 of the new pid namespace must be a child. --propagation private keeps
# every mount made inside from leaking back to the host.
exec unshare --pid --mount --net --uts --ipc --cgroup --fork --propagation private \
    "$here/inner.sh" "$work"
