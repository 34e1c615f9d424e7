# Vitis HLS: C simulation against the conformance vectors, synthesis, and
# C/RTL co-simulation of the NetDAM engine for a named part.
#
#   vitis_hls -f hls/run_hls.tcl                     (from fpga-port/)
#   PART=xcu55c-fsvh2892-2L-e CLOCK=4 vitis_hls -f hls/run_hls.tcl
#
# PART defaults to the Alveo U50's FPGA, CLOCK (ns) to 4 (250 MHz, a
# target, not a measured result). Stop after a step with STEPS=csim or
# STEPS=csim,csynth.

set part  [expr {[info exists ::env(PART)]  ? $::env(PART)  : "xcu50-fsvh2104-2-e"}]
set clock [expr {[info exists ::env(CLOCK)] ? $::env(CLOCK) : 4}]
set steps [expr {[info exists ::env(STEPS)] ? [split $::env(STEPS) ","] : {csim csynth cosim}}]
set vectors [file normalize "../tests/vectors/netdam.jsonl"]

open_project -reset netdam_hls
set_top netdam_top
add_files src/netdam_core.c -cflags "-std=c11 -Iinclude"
add_files src/netdam_alu.c  -cflags "-std=c11 -Iinclude"
add_files -tb tb/tb.c   -cflags "-std=c11 -Iinclude -Itb"
add_files -tb tb/json.c -cflags "-std=c11 -Iinclude -Itb"
open_solution -reset "solution1" -flow_target vivado
set_part $part
create_clock -period $clock -name default

if {[lsearch $steps csim] >= 0} {
    csim_design -argv $vectors
}
if {[lsearch $steps csynth] >= 0} {
    csynth_design
}
if {[lsearch $steps cosim] >= 0} {
    cosim_design -argv $vectors
}
exit
