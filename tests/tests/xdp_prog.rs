//! Tier 2: the XDP program in the kernel through BPF_PROG_TEST_RUN.

use netdam_common::{
    frame::{netdam_frame, parse_udp},
    NetdamHdr, Opcode,
};
use netdam_tests::progrun::*;

#[test]
fn nop_is_answered() {
    let node = load(&spec());
    let f = netdam_frame(&CLIENT, &NODE, &NetdamHdr::request(Opcode::Nop), &[]);
    let o = run(&node, &f);
    eprintln!("{:02x?}", o.frame);
    assert_eq!(o.action, XDP_TX);
    let v = parse_udp(&o.frame).expect("an answer frame");
    eprintln!("{v:?}");
}
