#!/bin/sh
# The synthesizability check of `make synth-check`, from the compiler's own
# outputs for the engine's sources (not the testbench):
#   - stack-usage files (-fstack-usage): every function's frame is static
#     (a VLA or alloca makes it "dynamic");
#   - call-graph files (-fcallgraph-info): no function reaches itself;
#   - the objects' undefined symbols: nothing from libc but memcpy, memset
#     and memmove (which compilers emit for plain copies): no allocation,
#     no stdio.
# Usage: synth_check.sh BUILD_DIR SOURCE...
set -eu
dir=$1
shift
fail=0
objs=""
rm -f "$dir"/*.su "$dir"/*.ci "$dir/callgraph.all"
for src in "$@"; do
    base=$(basename "$src" .c)
    obj="$dir/$base.o"
    gcc -std=c11 -Wall -Wextra -Werror -Wvla -Wno-unknown-pragmas -Iinclude -O0 -fstack-usage \
        -fcallgraph-info=su -c "$src" -o "$obj"
    su="$dir/$base.su"
    ci="$dir/$base.ci"
    if [ ! -f "$su" ] || [ ! -f "$ci" ]; then
        echo "synth-check: gcc wrote no stack-usage or call-graph file for $src in $dir" >&2
        exit 2
    fi
    if grep -q dynamic "$su"; then
        echo "synth-check: dynamic stack (VLA or alloca) in $src:" >&2
        grep dynamic "$su" >&2
        fail=1
    fi
    cat "$ci" >> "$dir/callgraph.all"
    objs="$objs $obj"
done
# Edges "source target" of the call graph; a self-edge is recursion, and
# tsort reports any longer cycle.
edges=$(sed -n 's/^edge: { sourcename: "\([^"]*\)" targetname: "\([^"]*\)".*/\1 \2/p' "$dir/callgraph.all" |
    sed 's/[^ ]*:\([^ :]*\) /\1 /; s/ [^ ]*:\([^ :]*\)$/ \1/')
rm -f "$dir/callgraph.all"
if echo "$edges" | awk '$1 == $2 { found = 1; print "synth-check: " $1 " calls itself" > "/dev/stderr" } END { exit !found }'; then
    fail=1
fi
if ! echo "$edges" | tsort > /dev/null 2> "$dir/tsort.err"; then
    echo "synth-check: recursion in the call graph:" >&2
    cat "$dir/tsort.err" >&2
    fail=1
fi
defined=$(nm --defined-only $objs | awk 'NF == 3 { print $3 }')
for sym in $(nm -u $objs | awk '$1 == "U" { print $2 }' | sort -u); do
    case "$sym" in
    memcpy | memset | memmove) ;;
    *)
        if ! echo "$defined" | grep -qx "$sym"; then
            echo "synth-check: the engine calls $sym (only memcpy, memset, memmove are allowed)" >&2
            fail=1
        fi
        ;;
    esac
done
[ "$fail" -eq 0 ] && echo "synth-check: static stacks, no recursion, no allocation or stdio in the engine"
exit "$fail"
