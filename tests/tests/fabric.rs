//! Tier 3: the testbed's fabrics. The XDP switch must carry every kind of
//! frame a host sends (ARP, TCP, UDP, IPv6) intact, and each fabric must
//! carry NetDAM's answers (except plain, which is for baselines).

use std::{
    io::{Read, Write},
    net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    process::Command,
    time::Duration,
};

use netdam_lab::testbed::{Fabric, Testbed};
use netdam_tests::{ip, netdam_bin, require_root, unique_prefix};

/// Seeded bytes (xorshift), so that corruption anywhere shows.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `data` over TCP from host `from` to `to` (server at `addr`); what the server read.
fn tcp_transfer(tb: &Testbed, from: usize, to: usize, addr: SocketAddr, data: Vec<u8>) -> Vec<u8> {
    let listener = tb.in_host(to, move || TcpListener::bind(addr)).unwrap().unwrap();
    let server = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().expect("accept");
        let mut got = Vec::new();
        c.read_to_end(&mut got).expect("read");
        got
    });
    tb.in_host(from, move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        s.write_all(&data).expect("send");
    })
    .unwrap();
    server.join().expect("server thread")
}

/// Sends one datagram of each size from host `from` to `to`; the datagrams that arrived.
fn udp_exchange(tb: &Testbed, from: usize, to: usize, dst: SocketAddr, sizes: &[usize]) -> Vec<Vec<u8>> {
    let rx = tb
        .in_host(to, move || {
            let s = UdpSocket::bind(dst)?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            Ok::<_, std::io::Error>(s)
        })
        .unwrap()
        .unwrap();
    let src: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let sizes = sizes.to_vec();
    tb.in_host(from, move || {
        let s = UdpSocket::bind(src).expect("bind");
        for (i, n) in sizes.iter().enumerate() {
            s.send_to(&pattern(*n, i as u64), dst).expect("send");
            // veth queues are short; one at a time keeps this a test of content, not of load.
            std::thread::sleep(Duration::from_millis(2));
        }
    })
    .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = rx.recv(&mut buf) {
        got.push(buf[..n].to_vec());
    }
    got
}

#[test]
fn xdp_switch_forwards_arp_tcp_udp_and_ipv6_intact() {
    require_root();
    let tb = Testbed::up_on(&unique_prefix(), 3, 1500, Fabric::Xdp).expect("testbed up");
    // ULA addresses without duplicate address detection, so they work at once.
    for (i, h) in tb.hosts.iter().enumerate() {
        ip(&[
            "-n",
            &h.netns,
            "addr",
            "add",
            &format!("fd00::{}/64", i + 1),
            "dev",
            "eth0",
            "nodad",
        ]);
    }
    let v4 = |i: usize, port: u16| SocketAddr::new(tb.hosts[i].ip.into(), port);
    let v6 = |i: usize, port: u16| SocketAddr::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i as u16 + 1).into(), port);

    // TCP with segments of every size the stack makes; the first connect needs ARP.
    let data = pattern(8 << 20, 7);
    assert!(
        tcp_transfer(&tb, 0, 2, v4(2, 5001), data.clone()) == data,
        "TCP over IPv4 changed bytes"
    );
    let data6 = pattern(2 << 20, 8);
    assert!(
        tcp_transfer(&tb, 1, 0, v6(0, 5002), data6.clone()) == data6,
        "TCP over IPv6 changed bytes"
    );

    let sizes = [1, 17, 512, 1472];
    let want: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, n)| pattern(*n, i as u64)).collect();
    assert_eq!(udp_exchange(&tb, 2, 1, v4(1, 6001), &sizes), want, "UDP over IPv4");
    let sizes6 = [1, 600, 1452];
    let want6: Vec<Vec<u8>> = sizes6.iter().enumerate().map(|(i, n)| pattern(*n, i as u64)).collect();
    assert_eq!(udp_exchange(&tb, 0, 2, v6(2, 6002), &sizes6), want6, "UDP over IPv6");

    let stats = tb.switch_stats().unwrap().expect("the XDP switch's counters");
    // 8 MiB of TCP alone is thousands of frames, all of them unicast.
    assert!(stats.redirected > 5000, "{stats:?}");
    // ARP requests and IPv6 neighbour solicitations are broadcast or multicast.
    assert!(stats.flooded >= 2, "{stats:?}");
    assert_eq!(stats.unknown, 0, "{stats:?}");
    assert_eq!(stats.impaired, 0, "{stats:?}");
}

/// `netdam ping` from host 1 to a node serving on host 0: its output.
fn ping_node(tb: &Testbed) -> String {
    let args: Vec<String> = ["--mem-size", "1MiB", "--region", "0x1234:0:1MiB:rw", "--mode", "native"]
        .map(String::from)
        .to_vec();
    let _served = tb.serve(0, &netdam_bin(), &args).expect("netdam serve");
    let out = tb
        .command(1, netdam_bin())
        .unwrap()
        .args(["ping", "--node", &tb.hosts[0].ip.to_string(), "--count", "20"])
        .output()
        .expect("run netdam ping");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn netdam_answers_cross_the_xdp_switch_port_to_port() {
    require_root();
    let tb = Testbed::up_on(&unique_prefix(), 2, 1500, Fabric::Xdp).expect("testbed up");
    let before = tb.switch_stats().unwrap().expect("counters").redirected;
    assert!(ping_node(&tb).contains("20 answered"));
    // 20 NOPs and their 20 XDP_TX answers, each redirected once.
    let after = tb.switch_stats().unwrap().expect("counters").redirected;
    assert!(after - before >= 40, "redirected {before} -> {after}");
}

#[test]
fn the_bridge_fabric_carries_netdam_and_has_no_switch_program() {
    require_root();
    let tb = Testbed::up_on(&unique_prefix(), 2, 1500, Fabric::Bridge).expect("testbed up");
    assert!(ping_node(&tb).contains("20 answered"));
    assert_eq!(tb.switch_stats().unwrap(), None);
}

#[test]
fn the_plain_fabric_carries_tcp_with_no_xdp_on_its_links() {
    require_root();
    let tb = Testbed::up_on(&unique_prefix(), 2, 1500, Fabric::Plain).expect("testbed up");
    let data = pattern(4 << 20, 9);
    let addr = SocketAddr::new(tb.hosts[1].ip.into(), 5003);
    assert!(tcp_transfer(&tb, 0, 1, addr, data.clone()) == data);
    let sw = format!("{}sw", tb.prefix);
    let links = Command::new("ip")
        .args(["-n", &sw, "-d", "link", "show"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&links.stdout);
    assert!(text.contains("p0") && !text.contains("xdp"), "{text}");
}
