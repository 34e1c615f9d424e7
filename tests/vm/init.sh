#!/bin/sh
# /init of a guest of the kernel matrix (`cargo xtask test --kernels`,
# docs/kernels.md): sets up the guest, serves NetDAM in native XDP on
# virtio_net's eth0, runs this guest's steps and prints one result line per
# step on the serial console, then powers off.
#
# Kernel command line (set by xtask/src/kernels.rs):
#   netdam.ip=A          this guest's IPv4 address on the link (/24)
#   netdam.group=A,B,C   every guest's address, in group order
#   netdam.vectors=1     this guest also runs the conformance vectors
#
# Result lines: `NDVM <step> ok|FAIL <detail>`, and `NDVM end` last.

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
/bin/busybox --install -s /bin

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs run /run
# No tmpfs on /tmp: the initramfs root is writable already, and a tmpfs would
# hide what xtask put under it (a checkout in /tmp keeps the vectors the test
# binary reads at /tmp/.../tests/vectors).
mkdir -p /tmp
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug

result() { echo "NDVM $*"; }
end() {
    result end
    sync
    poweroff -f
}
# The last lines of a failed step's output, indented, for the log.
tail_of() { tail -n 30 "$1" | sed 's/^/    | /'; }

IP= GROUP= VECTORS=0
for word in $(cat /proc/cmdline); do
    case "$word" in
        netdam.ip=*) IP=${word#netdam.ip=} ;;
        netdam.group=*) GROUP=${word#netdam.group=} ;;
        netdam.vectors=*) VECTORS=${word#netdam.vectors=} ;;
    esac
done
MEMBERS=$(echo "$GROUP" | tr , ' ')
# The next member in group order: this guest's WRITE/READ partner.
set -- $MEMBERS
NEXT=
FIRST=$1
while [ $# -gt 0 ]; do
    [ "$1" = "$IP" ] && NEXT=${2:-$FIRST}
    shift
done
result kernel ok "$(uname -r)"

# Modules in dependency order (xtask wrote the list).
for m in $(cat /lib/modules/order); do
    insmod "/lib/modules/$m.ko" || { result modules FAIL "insmod $m"; end; }
done
result modules ok "$(tr '\n' ' ' </lib/modules/order)"

ip link set lo up
ip link set eth0 up && ip addr add "$IP/24" dev eth0 || { result link FAIL "eth0 as $IP/24"; end; }
result link ok "eth0 $IP/24, $(ls /sys/class/net/eth0/queues | grep -c tx-) tx queues, $(ls /sys/devices/system/cpu | grep -c 'cpu[0-9]') CPUs"

# The steps on the link; a step that leaves the others pointless returns.
network_steps() {
    # What the all-reduce needs: rwa; every member a peer.
    set -- serve --iface eth0 --mode native --mem-size 4MiB --region 0x77:0:4MiB:rwa
    for m in $MEMBERS; do set -- "$@" --peer "$m"; done
    RUST_LOG=info netdam "$@" >/tmp/serve.log 2>&1 &
    SERVE=$!
    i=0
    until grep -q "serving NetDAM on" /tmp/serve.log; do
        i=$((i + 1))
        if ! kill -0 $SERVE 2>/dev/null || [ $i -gt 300 ]; then
            result serve FAIL "netdam serve --mode native did not come up"
            tail_of /tmp/serve.log
            return
        fi
        sleep 0.2
    done
    # virtio_net says so when it has fewer queue pairs than XDP_TX needs (one per CPU beside the stack's).
    if dmesg | grep -q "locked tx mode"; then TX=shared; else TX=dedicated; fi
    result serve ok "native XDP on virtio_net, XDP_TX queues $TX"

    # Every other member's node answering: the barrier before the steps that
    # need them (a node cannot be pinged from its own host: XDP sees no loopback).
    for m in $MEMBERS; do
        [ "$m" = "$IP" ] && continue
        i=0
        until netdam ping --node "$m" --count 1 --timeout-ms 300 --retries 2 >/dev/null 2>&1; do
            i=$((i + 1))
            if [ $i -gt 200 ]; then
                result peers FAIL "$m never answered a NOP"
                return
            fi
        done
    done
    result peers ok "the others of $GROUP answer"

    # WRITE then READ back 256 KiB at the partner, each writer at its own address.
    OFFSET=$(( (2048 + 512 * $(echo "$IP" | cut -d. -f4)) * 1024 ))
    dd if=/dev/urandom of=/tmp/sent bs=64k count=4 2>/dev/null
    if netdam write --node "$NEXT" --rkey 0x77 --addr $OFFSET --file /tmp/sent >/tmp/rw.log 2>&1 &&
        netdam read --node "$NEXT" --rkey 0x77 --addr $OFFSET --len 262144 --out /tmp/back >>/tmp/rw.log 2>&1 &&
        cmp /tmp/sent /tmp/back >>/tmp/rw.log 2>&1; then
        result write-read ok "256 KiB to $NEXT and back, equal"
    else
        result write-read FAIL "256 KiB to $NEXT and back"
        tail_of /tmp/rw.log
    fi

    # The ring all-reduce, every member beside its own serve; --check counts wrong elements.
    if netdam allreduce --group "$GROUP" --iface eth0 --rkey 0x77 --count 65536 --iters 3 --warmup 1 \
        --check --json --patience 120 >/tmp/ar.json 2>/tmp/ar.log; then
        result allreduce ok "$(tr -d '\n' </tmp/ar.json)"
    else
        result allreduce FAIL "$(tr -d '\n' </tmp/ar.json)"
        tail_of /tmp/ar.log
    fi
}
SERVE=
network_steps

# Last, so that the other members need not wait for it: the conformance
# vectors through BPF_PROG_TEST_RUN (a program of the test's own, beside serve's).
if [ "$VECTORS" = 1 ]; then
    # The test binary reads the vectors from the path it was built with; xtask put them there.
    if /usr/bin/vectors-test --test-threads=1 >/tmp/vectors.log 2>&1; then
        result vectors ok "$(grep -o '[0-9]* passed' /tmp/vectors.log | head -n1)"
    else
        result vectors FAIL "the vectors test binary failed"
        tail_of /tmp/vectors.log
    fi
fi

# The other members may still be finishing their last hops through this node.
sleep 10
if [ -n "$SERVE" ]; then
    kill $SERVE
    wait $SERVE
fi
end
