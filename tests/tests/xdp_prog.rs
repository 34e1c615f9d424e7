//! Tier 2: the real XDP program in the kernel, driven frame by frame through
//! BPF_PROG_TEST_RUN; memory checked through the controller's mmap.

use std::net::Ipv4Addr;

use netdam_common::{
    counters::{op_status, Event},
    frame::{netdam_frame, parse_udp, udp_frame, Endpoint, Ipv4Opts},
    wire::{flags, DEFAULT_PORT},
    NetdamHdr, Opcode, Status,
};
use netdam_tests::progrun::*;

fn hdr(op: Opcode, rkey: u32, addr: u64, len: u16) -> NetdamHdr {
    let mut h = NetdamHdr::request(op);
    h.set_rkey(rkey);
    h.set_addr(addr);
    h.set_len(len);
    h.set_seq(0xABCD_0001);
    h.set_tag(0x7A6);
    h
}

fn frame(h: &NetdamHdr, payload: &[u8]) -> Vec<u8> {
    netdam_frame(&CLIENT, &NODE, h, payload)
}

/// Checks that `o` is `req` answered per PROTOCOL.md section 3 with `status`,
/// and returns the response payload.
fn answered(o: &Outcome, req: &[u8], status: Status) -> Vec<u8> {
    assert_eq!(o.action, XDP_TX, "expected an answer (XDP_TX), got action {}", o.action);
    let q = parse_udp(req).unwrap();
    let (qh, _) = q.netdam().unwrap();
    let a = parse_udp(&o.frame).expect("the answer parses as Ethernet/IPv4/UDP");
    assert_eq!((a.dst_mac, a.src_mac), (q.src_mac, q.dst_mac), "MACs swapped");
    assert_eq!((a.src_ip, a.dst_ip), (q.dst_ip, q.src_ip), "IPs swapped");
    assert_eq!((a.src_port, a.dst_port), (q.dst_port, q.src_port), "ports swapped");
    assert_eq!(a.ihl, 5, "IHL 5");
    assert_eq!(
        (a.tos, a.ip_id, a.frag, a.ttl),
        (q.tos, 0, 0x4000, 64),
        "TOS copied, ID 0, DF, TTL 64"
    );
    assert!(a.ip_checksum_ok, "IPv4 header checksum");
    assert_eq!(a.udp_checksum, 0, "UDP checksum 0");
    assert_eq!(
        a.ip_total_len as usize + 14,
        o.frame.len(),
        "nothing follows the datagram"
    );
    let (ah, rest) = a.netdam().expect("a NetDAM header");
    // The header is echoed with its sr_len, and the answer keeps those bytes (section 3).
    assert_eq!(ah.sr_len, qh.sr_len);
    let payload = &rest[ah.sr_len as usize..];
    assert_eq!(ah.flags, flags::RESP | (qh.flags & flags::ACK_REQ));
    assert_eq!(Status::from_u8(ah.status), Some(status), "status");
    assert_eq!(ah.credit(), 0xFFFF);
    assert_eq!(ah.len() as usize, payload.len(), "len = the payload bytes");
    assert_eq!(
        (ah.seq(), ah.tag(), ah.addr(), ah.rkey(), ah.opcode),
        (qh.seq(), qh.tag(), qh.addr(), qh.rkey(), qh.opcode)
    );
    if status != Status::Ok {
        assert!(payload.is_empty(), "an error carries no payload");
    }
    payload.to_vec()
}

fn passed_untouched(o: &Outcome, f: &[u8]) {
    assert_eq!(o.action, XDP_PASS, "expected XDP_PASS");
    assert_eq!(o.frame, f, "a passed frame must be byte-identical");
}

fn counter(node: &netdam_user::Node, index: u32) -> u64 {
    node.counters().unwrap()[index as usize]
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn nop_is_answered_exactly() {
    let node = load(&spec());
    for f in [0, flags::ACK_REQ] {
        let mut h = hdr(Opcode::Nop, 0, 0, 0);
        h.flags = f;
        let req = frame(&h, &[]);
        let o = run(&node, &req);
        assert!(answered(&o, &req, Status::Ok).is_empty());
    }
    assert_eq!(counter(&node, op_status(0, Status::Ok)), 2);
}

#[test]
fn write_then_read_back_through_the_mmap() {
    let node = load(&spec());
    let data = random_bytes(1440, 1);
    let req = frame(&hdr(Opcode::Write, RKEY_RW, RW.base + 8, 1440), &data);
    let o = run(&node, &req);
    assert_eq!(o.action, XDP_DROP, "a WRITE without ACK_REQ is consumed silently");
    let mem = node.memory().read(RW.base + 8, 1440).unwrap();
    assert_eq!(mem, data);
    // Neighbouring bytes untouched.
    let mut edge = [0xEEu8; 8];
    node.memory().read_into(RW.base, &mut edge).unwrap();
    assert_eq!(edge, [0; 8]);

    let mut h = hdr(Opcode::Write, RKEY_RW, RW.base + 8, 4);
    h.flags = flags::ACK_REQ;
    let req = frame(&h, &[1, 2, 3, 4]);
    assert!(answered(&run(&node, &req), &req, Status::Ok).is_empty());

    let req = frame(&hdr(Opcode::Read, RKEY_RW, RW.base + 8, 1440), &[0u8; 1440]);
    let got = answered(&run(&node, &req), &req, Status::Ok);
    let mut want = data.clone();
    want[..4].copy_from_slice(&[1, 2, 3, 4]);
    assert_eq!(got, want);
    assert_eq!(counter(&node, op_status(1, Status::Ok)), 2);
    assert_eq!(counter(&node, op_status(2, Status::Ok)), 1);
}

#[test]
fn writes_and_reads_cross_memory_chunk_boundaries() {
    let node = load(&spec());
    let chunk = netdam_common::config::MEM_CHUNK as u64;
    for (i, start) in [chunk - 700, chunk - 1, 2 * chunk - 1439, chunk]
        .into_iter()
        .enumerate()
    {
        let data = random_bytes(1440, 10 + i as u64);
        let mut h = hdr(Opcode::Write, RKEY_RW, start, 1440);
        h.flags = flags::ACK_REQ;
        let req = frame(&h, &data);
        answered(&run(&node, &req), &req, Status::Ok);
        let mem = node.memory().read(start, 1440).unwrap();
        assert_eq!(mem, data, "write at {start:#x}");
        // And the data path reads back what the host placed.
        let host = random_bytes(1440, 100 + i as u64);
        node.memory().write(start, &host).unwrap();
        let req = frame(&hdr(Opcode::Read, RKEY_RW, start, 1440), &[0u8; 1440]);
        assert_eq!(
            answered(&run(&node, &req), &req, Status::Ok),
            host,
            "read at {start:#x}"
        );
    }
}

#[test]
fn zero_length_read_and_write_are_valid() {
    let node = load(&spec());
    let end = RW.base + RW.size;
    for op in [Opcode::Read, Opcode::Write] {
        let mut h = hdr(op, RKEY_RW, end, 0);
        h.flags = flags::ACK_REQ;
        let req = frame(&h, &[]);
        assert!(
            answered(&run(&node, &req), &req, Status::Ok).is_empty(),
            "{op:?} of 0 bytes at the region's end"
        );
    }
}

#[test]
fn bounds_are_exact_to_the_byte() {
    let node = load(&spec());
    let end = RW.base + RW.size;
    let cases = [
        (RW.base, 4, Status::Ok),
        (end - 4, 4, Status::Ok),
        (end - 4, 5, Status::OutOfBounds),
        (end - 3, 4, Status::OutOfBounds),
        (RW.base - 1, 4, Status::OutOfBounds),
        (u64::MAX - 1, 4, Status::OutOfBounds),
    ];
    for (addr, len, want) in cases {
        let mut h = hdr(Opcode::Write, RKEY_RW, addr, len);
        h.flags = flags::ACK_REQ;
        let before = snapshot(&node);
        let req = frame(&h, &vec![0x5A; len as usize]);
        answered(&run(&node, &req), &req, want);
        if want != Status::Ok {
            assert_eq!(snapshot(&node), before, "a refused write changes no memory");
        }
        let req = frame(&hdr(Opcode::Read, RKEY_RW, addr, len), &vec![0; len as usize]);
        let got = answered(&run(&node, &req), &req, want);
        if want == Status::Ok {
            assert_eq!(got, vec![0x5A; len as usize]);
        }
    }
}

/// The whole 1 MiB memory, to prove that a refused request changed nothing.
fn snapshot(node: &netdam_user::Node) -> Vec<u8> {
    let m = node.memory().read(0, node.memory().len()).unwrap();
    m
}

#[test]
fn keys_and_permissions() {
    let node = load(&spec());
    let cases = [
        (Opcode::Write, 0xBAD, RW.base, Status::BadKey),
        (Opcode::Read, 0xBAD, RW.base, Status::BadKey),
        (Opcode::Write, RKEY_RO, RO.base, Status::Forbidden),
        (Opcode::Read, RKEY_RO, RO.base, Status::Ok),
        // The region named by rkey decides, not where addr happens to fall.
        (Opcode::Read, RKEY_RO, RW.base, Status::OutOfBounds),
    ];
    for (op, rkey, addr, want) in cases {
        let mut h = hdr(op, rkey, addr, 16);
        h.flags = flags::ACK_REQ;
        let req = frame(&h, &[0x11; 16]);
        let before = snapshot(&node);
        answered(&run(&node, &req), &req, want);
        if op == Opcode::Write {
            assert_eq!(snapshot(&node), before);
        }
    }
    assert_eq!(counter(&node, op_status(1, Status::Forbidden)), 1);
    assert_eq!(counter(&node, op_status(2, Status::BadKey)), 1);
}

/// docs/conformance.md 21: BAD_KEY answers are rationed per source; over
/// the limit the request is dropped and counted, and the source is locked
/// out until its allowance refills. Other sources are not affected.
#[test]
fn bad_key_answers_are_rate_limited_per_source() {
    const LIMIT: u64 = 10;
    let node = load(&netdam_user::NodeSpec {
        bad_key_limit: LIMIT as u32,
        ..spec()
    });
    let started = std::time::Instant::now();
    // The bucket holds LIMIT answers and refills one per 1 s / LIMIT.
    let refills = || (started.elapsed().as_nanos() as u64 * LIMIT) / 1_000_000_000;
    let burst = 50;
    let mut answered_bad_key = 0;
    for i in 0..burst {
        let mut h = hdr(Opcode::Read, 0xBAD0_0000 + i as u32, RW.base, 16);
        h.flags = flags::ACK_REQ;
        let req = frame(&h, &[0; 16]);
        let o = run(&node, &req);
        match o.action {
            XDP_TX => {
                answered(&o, &req, Status::BadKey);
                answered_bad_key += 1;
            }
            XDP_DROP => {}
            a => panic!("guess {i}: action {a}"),
        }
    }
    assert!(
        (LIMIT..=LIMIT + refills()).contains(&answered_bad_key),
        "{answered_bad_key} BAD_KEY answers to a burst of {burst} in {:?}",
        started.elapsed()
    );
    let locked = counter(&node, Event::DropBadKeyLockout as u32);
    assert!(locked >= 1, "the guesses after the allowance are locked out");
    assert_eq!(
        counter(&node, Event::BadKeyLimited as u32) + locked,
        burst - answered_bad_key,
        "every drop is counted once"
    );
    // Every BAD_KEY answered is counted as before; the dropped ones are not.
    assert_eq!(
        counter(&node, op_status(Opcode::Read as u8, Status::BadKey)),
        answered_bad_key
    );
    // Another source is still answered.
    let other = Endpoint {
        mac: [0x02, 0xDA, 0, 0, 0, 3],
        ip: Ipv4Addr::new(198, 18, 0, 3),
        port: 40001,
    };
    let req = netdam_frame(&other, &NODE, &hdr(Opcode::Read, 0xBAD, RW.base, 16), &[0; 16]);
    answered(&run(&node, &req), &req, Status::BadKey);
}

/// docs/conformance.md 21: while a source's bucket is dry every request
/// from it is dropped, a right key and NOP too (silence must not tell a
/// right guess from a wrong one); once it refills the source is served.
#[test]
fn a_key_guesser_is_locked_out_until_its_allowance_refills() {
    // One BAD_KEY answer a second.
    let node = load(&netdam_user::NodeSpec {
        bad_key_limit: 1,
        ..spec()
    });
    node.memory().write(RW.base, &[0x5A; 16]).unwrap();
    let guess = frame(&hdr(Opcode::Read, 0xBAD, RW.base, 16), &[0; 16]);
    let right = frame(&hdr(Opcode::Read, RKEY_RW, RW.base, 16), &[0; 16]);
    let nop = frame(&hdr(Opcode::Nop, 0, 0, 0), &[]);
    let started = std::time::Instant::now();
    // The bucket drawn dry by its one answer, the source is locked out.
    answered(&run(&node, &guess), &guess, Status::BadKey);
    assert_eq!(run(&node, &guess).action, XDP_DROP, "a second guess");
    assert_eq!(run(&node, &right).action, XDP_DROP, "a right key while locked out");
    assert_eq!(run(&node, &nop).action, XDP_DROP, "NOP while locked out");
    assert_eq!(counter(&node, Event::DropBadKeyLockout as u32), 3);
    assert!(
        started.elapsed() < std::time::Duration::from_millis(900),
        "the lockout lasts 1 s; this test took {:?} to get here",
        started.elapsed()
    );
    // Others are served meanwhile.
    let other = Endpoint {
        mac: [0x02, 0xDA, 0, 0, 0, 3],
        ip: Ipv4Addr::new(198, 18, 0, 3),
        port: 40001,
    };
    let theirs = netdam_frame(&other, &NODE, &hdr(Opcode::Read, RKEY_RW, RW.base, 16), &[0; 16]);
    assert_eq!(answered(&run(&node, &theirs), &theirs, Status::Ok), [0x5A; 16]);
    // A second on, one answer's allowance is back.
    std::thread::sleep(std::time::Duration::from_millis(1050));
    assert_eq!(answered(&run(&node, &right), &right, Status::Ok), [0x5A; 16]);
    answered(&run(&node, &guess), &guess, Status::BadKey);
    assert_eq!(
        run(&node, &right).action,
        XDP_DROP,
        "dry again after the next wrong guess"
    );
    assert_eq!(counter(&node, op_status(Opcode::Read as u8, Status::BadKey)), 2);
}

/// The same limit for a CHAIN hop answered BAD_KEY, keyed by the frame's
/// IPv4 source (here the origin, a peer).
#[test]
fn chain_bad_key_answers_are_rate_limited() {
    use netdam_common::chain::{HopOp, Segment, SrFixed, SEGMENT_LEN, SR_FIXED_LEN};
    let mut node = load(&netdam_user::NodeSpec {
        peers: vec![CLIENT.ip],
        bad_key_limit: 2,
        ..spec()
    });
    node.bind_peer_macs(&[(CLIENT.ip, CLIENT.mac)]).unwrap();
    let chain = |rkey: u32| {
        let mut h = NetdamHdr::request(Opcode::Chain);
        h.sr_len = (SR_FIXED_LEN + SEGMENT_LEN) as u8;
        h.set_rkey(rkey);
        h.set_addr(RW.base);
        h.set_len(8);
        let mut rest = SrFixed::new(1, 0, CLIENT.ip.into(), CLIENT.port, RW.base)
            .to_bytes()
            .to_vec();
        rest.extend_from_slice(&Segment::new(NODE.ip.into(), NODE.port, HopOp::Nop).to_bytes());
        rest.extend_from_slice(&[7; 8]);
        frame(&h, &rest)
    };
    let status = |o: &Outcome| {
        assert_eq!(o.action, XDP_TX);
        parse_udp(&o.frame).unwrap().netdam().unwrap().0.status
    };
    let started = std::time::Instant::now();
    let first = run(&node, &chain(0xBAD));
    assert_eq!(status(&first), Status::BadKey as u8);
    let answers: Vec<u32> = std::iter::once(first.action)
        .chain((1..6).map(|_| run(&node, &chain(0xBAD)).action))
        .collect();
    let tx = answers.iter().filter(|a| **a == XDP_TX).count() as u64;
    let refills = (started.elapsed().as_nanos() as u64 * 2) / 1_000_000_000;
    assert!((2..=2 + refills).contains(&tx), "{answers:?}");
    assert!(answers.iter().all(|a| [XDP_TX, XDP_DROP].contains(a)), "{answers:?}");
    let locked = counter(&node, Event::DropBadKeyLockout as u32);
    assert!(locked >= 1);
    assert_eq!(counter(&node, Event::BadKeyLimited as u32) + locked, 6 - tx);
    assert_eq!(counter(&node, op_status(Opcode::Chain as u8, Status::BadKey)), tx);
    // Once the allowance refills (one answer per 500 ms), a hop with the key runs and answers.
    std::thread::sleep(std::time::Duration::from_millis(550));
    assert_eq!(status(&run(&node, &chain(RKEY_RW))), Status::Ok as u8);
}

#[test]
fn header_errors_in_protocol_order() {
    let node = load(&spec());
    let mut v2 = hdr(Opcode::Nop, 0, 0, 4);
    v2.version = 2;
    v2.opcode = 0x7F;
    let mut bad_op = hdr(Opcode::Nop, 0, 0, 0);
    bad_op.opcode = 0x7F;
    let nop_len = hdr(Opcode::Nop, 0, 0, 4);
    let mut sr_on_write = hdr(Opcode::Write, RKEY_RW, RW.base, 4);
    sr_on_write.sr_len = 24;
    for (h, payload, want) in [
        (v2, vec![0; 4], Status::BadVersion),
        (bad_op, vec![], Status::BadOpcode),
        (nop_len, vec![0; 4], Status::BadLength),
        (sr_on_write, vec![0; 28], Status::BadSr),
        // A READ whose padding is missing.
        (hdr(Opcode::Read, RKEY_RW, RW.base, 64), vec![0; 63], Status::BadLength),
        // 20 + 8 + 32 + 1441 > MTU 1500.
        (
            hdr(Opcode::Read, RKEY_RW, RW.base, 1441),
            vec![0; 1441],
            Status::TooLarge,
        ),
    ] {
        let req = frame(&h, &payload);
        answered(&run(&node, &req), &req, want);
    }
}

#[test]
fn malformed_frames_are_dropped_and_counted() {
    let node = load(&spec());
    let mut bad_magic = hdr(Opcode::Nop, 0, 0, 0);
    bad_magic.magic = 0xDB;
    let o = run(&node, &frame(&bad_magic, &[]));
    assert_eq!(o.action, XDP_DROP);
    assert_eq!(counter(&node, Event::DropBadMagic as u32), 1);

    // len larger than the datagram.
    let o = run(&node, &frame(&hdr(Opcode::Write, RKEY_RW, RW.base, 100), &[0; 99]));
    assert_eq!(o.action, XDP_DROP);
    assert_eq!(counter(&node, Event::DropLenPastDatagram as u32), 1);

    // Datagrams too short for the NetDAM header, with consistent lengths.
    for n in 0..32 {
        let f = udp_frame(
            &CLIENT,
            &NODE,
            &Ipv4Opts::default(),
            &hdr(Opcode::Nop, 0, 0, 0).to_bytes()[..n],
        );
        assert_eq!(run(&node, &f).action, XDP_DROP, "{n}-byte NetDAM header");
    }
    assert_eq!(counter(&node, Event::DropTruncated as u32), 32);
}

#[test]
fn frames_cut_at_every_header_boundary() {
    let node = load(&spec());
    let full = frame(&hdr(Opcode::Write, RKEY_RW, RW.base, 8), &[7; 8]);
    let before = snapshot(&node);
    // BPF_PROG_TEST_RUN needs at least an Ethernet header.
    for cut in 14..full.len() {
        let f = &full[..cut];
        let o = run(&node, f);
        if cut < 14 + 20 + 8 {
            // Not recognisable as a UDP datagram to port P: the kernel judges it.
            passed_untouched(&o, f);
        } else {
            assert_eq!(o.action, XDP_DROP, "frame cut to {cut} bytes");
        }
    }
    assert_eq!(snapshot(&node), before, "no cut frame wrote anything");
    assert_eq!(counter(&node, Event::DropTruncated as u32), (full.len() - 42) as u64);
}

#[test]
fn ipv4_options_are_dropped_from_answers() {
    let node = load(&spec());
    for opt_words in [1usize, 2, 10] {
        // NOP options (1) padded with EOL (0), 4 bytes per word.
        let mut options = vec![1u8; opt_words * 4];
        *options.last_mut().unwrap() = 0;
        let ip = Ipv4Opts {
            tos: 0x28,
            options,
            ..Default::default()
        };
        let data = random_bytes(64, opt_words as u64);
        node.memory().write(RW.base, &data).unwrap();
        let mut h = hdr(Opcode::Read, RKEY_RW, RW.base, 64);
        h.flags = flags::ACK_REQ;
        let mut payload = h.to_bytes().to_vec();
        payload.extend_from_slice(&[0; 64]);
        let req = udp_frame(&CLIENT, &NODE, &ip, &payload);
        let o = run(&node, &req);
        assert_eq!(answered(&o, &req, Status::Ok), data, "{opt_words} option words");
        assert_eq!(o.frame.len(), 14 + 20 + 8 + 32 + 64);
    }
}

#[test]
fn ethernet_padding_after_the_datagram_is_ignored() {
    let node = load(&spec());
    let mut req = frame(&hdr(Opcode::Nop, 0, 0, 0), &[]);
    req.extend_from_slice(&[0xEE; 18]);
    let o = run(&node, &req);
    answered(&o, &req, Status::Ok);
    assert_eq!(o.frame.len(), 74);
}

#[test]
fn fragments() {
    let node = load(&spec());
    let payload = frame(&hdr(Opcode::Nop, 0, 0, 0), &[]);
    let nd = &payload[42..];
    let first = udp_frame(
        &CLIENT,
        &NODE,
        &Ipv4Opts {
            frag: 0x2000,
            ..Default::default()
        },
        nd,
    );
    assert_eq!(run(&node, &first).action, XDP_DROP, "a first fragment to port P");
    assert_eq!(counter(&node, Event::DropFragment as u32), 1);
    let later = udp_frame(
        &CLIENT,
        &NODE,
        &Ipv4Opts {
            frag: 0x2000 | 185,
            ..Default::default()
        },
        nd,
    );
    passed_untouched(&run(&node, &later), &later);
    let last = udp_frame(
        &CLIENT,
        &NODE,
        &Ipv4Opts {
            frag: 185,
            ..Default::default()
        },
        nd,
    );
    passed_untouched(&run(&node, &last), &last);
    let other_port = Endpoint { port: 53, ..NODE };
    let first_other = udp_frame(
        &CLIENT,
        &other_port,
        &Ipv4Opts {
            frag: 0x2000,
            ..Default::default()
        },
        nd,
    );
    passed_untouched(&run(&node, &first_other), &first_other);
}

#[test]
fn udp_checksums() {
    let mut good = frame(&hdr(Opcode::Nop, 0, 0, 0), &[]);
    let mut bad = good.clone();
    bad[40] ^= 0x55;
    let mut zero = good.clone();
    zero[40] = 0;
    zero[41] = 0;
    // The IP ID is outside the UDP checksum: only the header checksum is wrong.
    let mut bad_ip = good.clone();
    bad_ip[18] ^= 0x01;
    // The IPv4 header checksum covers the options.
    let opts = Ipv4Opts {
        options: vec![1, 1, 1, 0],
        ..Default::default()
    };
    let with_options = udp_frame(&CLIENT, &NODE, &opts, &hdr(Opcode::Nop, 0, 0, 0).to_bytes());
    let mut bad_option = with_options.clone();
    bad_option[35] ^= 0x80;
    // Off by default: no checksum is looked at.
    let node = load(&spec());
    for f in [&bad, &zero, &bad_ip, &bad_option] {
        answered(&run(&node, f), f, Status::Ok);
    }
    drop(node);

    let node = load(&netdam_user::NodeSpec {
        verify_csum: true,
        ..spec()
    });
    answered(&run(&node, &good), &good, Status::Ok);
    answered(&run(&node, &with_options), &with_options, Status::Ok);
    // A zero UDP checksum ("none" in IPv4) is dropped too.
    for f in [&bad, &zero, &bad_ip, &bad_option] {
        assert_eq!(run(&node, f).action, XDP_DROP);
    }
    assert_eq!(counter(&node, Event::DropBadChecksum as u32), 4);
    // Odd payload lengths and payloads longer than one 512-byte summing step.
    for n in [1usize, 3, 511, 513, 1400] {
        let mut h = hdr(Opcode::Write, RKEY_RW, RW.base, n as u16);
        h.flags = flags::ACK_REQ;
        good = frame(&h, &random_bytes(n, n as u64));
        answered(&run(&node, &good), &good, Status::Ok);
        bad = good.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(run(&node, &bad).action, XDP_DROP, "{n}-byte payload, one bit flipped");
    }
}

#[test]
fn sources_never_answered_and_peers() {
    let node = load(&spec());
    for src in [
        Ipv4Addr::new(127, 0, 0, 1),
        Ipv4Addr::new(0, 1, 2, 3),
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::BROADCAST,
    ] {
        let from = Endpoint { ip: src, ..CLIENT };
        let f = netdam_frame(&from, &NODE, &hdr(Opcode::Nop, 0, 0, 0), &[]);
        assert_eq!(run(&node, &f).action, XDP_DROP, "source {src}");
    }
    assert_eq!(counter(&node, Event::DropBadSource as u32), 4);
    drop(node);

    let mut node = load(&netdam_user::NodeSpec {
        peers: vec![CLIENT.ip],
        ..spec()
    });
    // A peer whose MAC is not bound yet is not served.
    let f = frame(&hdr(Opcode::Nop, 0, 0, 0), &[]);
    assert_eq!(run(&node, &f).action, XDP_DROP);
    assert_eq!(counter(&node, Event::DropPeerMac as u32), 1);
    node.bind_peer_macs(&[(CLIENT.ip, CLIENT.mac)]).unwrap();
    answered(&run(&node, &f), &f, Status::Ok);
    // The peer's address from another MAC: a spoofer, dropped; answers too.
    let spoofer = Endpoint {
        mac: [0x02, 0xBA, 0xD0, 0, 0, 1],
        ..CLIENT
    };
    let before = snapshot(&node);
    let w = netdam_frame(&spoofer, &NODE, &hdr(Opcode::Write, RKEY_RW, RW.base, 4), &[9; 4]);
    assert_eq!(run(&node, &w).action, XDP_DROP);
    let mut resp = hdr(Opcode::Nop, 0, 0, 0);
    resp.flags = flags::RESP;
    let r = netdam_frame(&spoofer, &NODE, &resp, &[]);
    assert_eq!(run(&node, &r).action, XDP_DROP);
    assert_eq!(snapshot(&node), before);
    assert_eq!(counter(&node, Event::DropPeerMac as u32), 3);
    // The node's own address from the wire.
    let me = Endpoint { ip: NODE.ip, ..CLIENT };
    let w = netdam_frame(&me, &NODE, &hdr(Opcode::Write, RKEY_RW, RW.base, 4), &[9; 4]);
    assert_eq!(run(&node, &w).action, XDP_DROP);
    assert_eq!(snapshot(&node), before);
    assert_eq!(counter(&node, Event::DropOwnAddress as u32), 1);
    let stranger = Endpoint {
        ip: Ipv4Addr::new(198, 18, 0, 99),
        ..CLIENT
    };
    let f = netdam_frame(&stranger, &NODE, &hdr(Opcode::Write, RKEY_RW, RW.base, 4), &[9; 4]);
    let before = snapshot(&node);
    assert_eq!(run(&node, &f).action, XDP_DROP);
    assert_eq!(snapshot(&node), before);
    assert_eq!(counter(&node, Event::DropNotPeer as u32), 1);
}

#[test]
fn responses_go_to_the_host() {
    let node = load(&spec());
    let mut h = hdr(Opcode::Write, RKEY_RW, RW.base, 4);
    h.flags = flags::RESP;
    let f = frame(&h, &[1; 4]);
    let before = snapshot(&node);
    passed_untouched(&run(&node, &f), &f);
    assert_eq!(snapshot(&node), before, "a RESP packet is never executed");
    assert_eq!(counter(&node, Event::PassResponse as u32), 1);
}

#[test]
fn traffic_that_is_not_netdam_passes_byte_identical() {
    let node = load(&spec());
    let nd = hdr(Opcode::Nop, 0, 0, 0).to_bytes();
    let mut frames: Vec<(&str, Vec<u8>)> = Vec::new();
    // ARP request.
    let mut arp = vec![0xFF; 6];
    arp.extend_from_slice(&CLIENT.mac);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&CLIENT.mac);
    arp.extend_from_slice(&CLIENT.ip.octets());
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&NODE.ip.octets());
    frames.push(("ARP", arp));
    // ICMP echo and TCP to port P: IPv4 with another protocol.
    for (name, proto) in [("ICMP", 1u8), ("TCP", 6u8)] {
        let mut f = udp_frame(&CLIENT, &NODE, &Ipv4Opts::default(), &nd);
        f[23] = proto;
        frames.push((name, f));
    }
    frames.push((
        "UDP to another port",
        udp_frame(&CLIENT, &Endpoint { port: 4794, ..NODE }, &Ipv4Opts::default(), &nd),
    ));
    frames.push((
        "UDP to another IP",
        udp_frame(
            &CLIENT,
            &Endpoint {
                ip: Ipv4Addr::new(198, 18, 0, 7),
                ..NODE
            },
            &Ipv4Opts::default(),
            &nd,
        ),
    ));
    frames.push((
        "UDP to another MAC",
        udp_frame(
            &CLIENT,
            &Endpoint {
                mac: [2, 0, 0, 0, 0, 9],
                ..NODE
            },
            &Ipv4Opts::default(),
            &nd,
        ),
    ));
    frames.push((
        "broadcast MAC",
        udp_frame(&CLIENT, &Endpoint { mac: [0xFF; 6], ..NODE }, &Ipv4Opts::default(), &nd),
    ));
    // IPv6 UDP to port P.
    let mut v6 = NODE.mac.to_vec();
    v6.extend_from_slice(&CLIENT.mac);
    v6.extend_from_slice(&[0x86, 0xDD, 0x60, 0, 0, 0, 0, 40, 17, 64]);
    v6.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    v6.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v6.extend_from_slice(&[0x9C, 0x40, (DEFAULT_PORT >> 8) as u8, DEFAULT_PORT as u8, 0, 40, 0, 0]);
    v6.extend_from_slice(&nd);
    frames.push(("IPv6", v6));
    // VLAN-tagged IPv4 NetDAM: not parsed, passed.
    let plain = frame(&hdr(Opcode::Nop, 0, 0, 0), &[]);
    let mut vlan = plain[..12].to_vec();
    vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    vlan.extend_from_slice(&plain[12..]);
    frames.push(("VLAN", vlan));
    for (name, f) in &frames {
        let o = run(&node, f);
        assert_eq!(o.action, XDP_PASS, "{name}");
        assert_eq!(&o.frame, f, "{name} must pass byte-identical");
    }
    assert!(
        node.counters().unwrap().iter().all(|c| *c == 0),
        "nothing of that is counted"
    );
}

/// The AF_XDP client's steering program (netdam-client-xdp) under
/// BPF_PROG_TEST_RUN: the node's answer to a WRITE from a transfer's port
/// becomes an ack word in the flow's slot and is dropped; its other answers
/// go to the socket map (here empty, so they fall back to the kernel and
/// are counted as such); a stranger's frames to that port, WRITE answers
/// included, are dropped, counted and leave no ack; everything else passes
/// byte-identical and uncounted.
#[test]
fn the_client_steering_program_takes_only_its_nodes_answers() {
    use aya::{
        maps::{Array, HashMap, PerCpuArray},
        programs::{TestRun, TestRunOptions, Xdp},
        EbpfLoader,
    };
    use netdam_common::steer::{ack_index, ack_status, ClientFlow};
    netdam_tests::require_root();
    let mut ebpf = EbpfLoader::new()
        .load(netdam_user::client::NETDAM_CLIENT_XDP)
        .expect("load the client's steering object");
    let mut flows: HashMap<_, u16, ClientFlow> =
        HashMap::try_from(ebpf.map_mut("NETDAM_CLIENT_FLOWS").unwrap()).unwrap();
    // The client (CLIENT's address) talks from port 40000 to the node.
    flows
        .insert(CLIENT.port, ClientFlow::new(NODE.ip.octets(), NODE.port, 5), 0)
        .unwrap();
    let prog: &mut Xdp = ebpf.program_mut("netdam_client_rx").unwrap().try_into().unwrap();
    prog.load().unwrap();
    let run = |prog: &Xdp, f: &[u8]| {
        let mut out = vec![0u8; f.len() + 256];
        let r = prog
            .test_run(TestRunOptions {
                data_in: Some(f),
                data_out: Some(&mut out),
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN");
        out.truncate(r.data_size_out as usize);
        (r.return_value, out)
    };
    let mut answer = hdr(Opcode::Write, RKEY_RW, 0x1000, 0);
    answer.flags = flags::RESP | flags::ACK_REQ;
    answer.status = Status::OutOfBounds as u8;
    let from = |src: Endpoint| netdam_frame(&src, &CLIENT, &answer, &[]);
    let mut read = hdr(Opcode::Read, RKEY_RW, 0x1000, 4);
    read.flags = flags::RESP;
    let read_answer = netdam_frame(&NODE, &CLIENT, &read, &[1, 2, 3, 4]);
    let stranger_ip = Endpoint {
        ip: Ipv4Addr::new(198, 18, 0, 9),
        ..NODE
    };
    let stranger_port = Endpoint { port: 4794, ..NODE };
    let other_port = netdam_frame(&NODE, &Endpoint { port: 40001, ..CLIENT }, &answer, &[]);
    let fragment = udp_frame(
        &NODE,
        &CLIENT,
        &Ipv4Opts {
            frag: 0x2000,
            ..Ipv4Opts::default()
        },
        &answer.to_bytes(),
    );
    let prog: &Xdp = ebpf.program("netdam_client_rx").unwrap().try_into().unwrap();
    let acks: Array<_, u64> = Array::try_from(ebpf.map("NETDAM_CLIENT_ACKS").unwrap()).unwrap();
    let ack = || ack_status(acks.get(&ack_index(5, answer.seq()), 0).unwrap(), answer.seq());
    for (name, f) in [
        ("another source address", from(stranger_ip)),
        ("another source port", from(stranger_port)),
    ] {
        assert_eq!(run(prog, &f).0, XDP_DROP, "{name}");
    }
    assert_eq!(ack(), None, "a stranger's WRITE answer leaves no ack");
    assert_eq!(
        run(prog, &from(NODE)).0,
        XDP_DROP,
        "a WRITE's answer is kept, not passed"
    );
    assert_eq!(
        ack(),
        Some(Status::OutOfBounds as u8),
        "its seq and status in the flow's slot"
    );
    let (action, _) = run(prog, &read_answer);
    assert_eq!(
        action, XDP_PASS,
        "a READ's answer, no socket on the queue: the kernel's"
    );
    for (name, f) in [
        ("a port without a transfer", other_port),
        ("a fragment", fragment),
        ("a runt", from(NODE)[..30].to_vec()),
    ] {
        let (action, out) = run(prog, &f);
        assert_eq!((action, &out), (XDP_PASS, &f), "{name} passes byte-identical");
    }
    let counts: PerCpuArray<_, u64> = PerCpuArray::try_from(ebpf.map("NETDAM_CLIENT_COUNTS").unwrap()).unwrap();
    let count = |i: u32| counts.get(&i, 0).unwrap().iter().sum::<u64>();
    assert_eq!(
        (count(0), count(1), count(2), count(3)),
        (0, 2, 1, 1),
        "delivered, strangers dropped, passed for want of a socket, kept as acks"
    );
}
