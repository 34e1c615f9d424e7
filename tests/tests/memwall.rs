//! Tier 3: `netdam-lab bench memwall --quick`, the smoke configuration, on a
//! testbed of its own: every row is there, every mode delivered, and the
//! bytes each mode handed the host are what PROTOCOL.md makes them.

use netdam_tests::{netdam_lab_bin, require_root, unique_prefix};

#[test]
fn the_quick_memwall_run_has_every_row_and_the_bytes_each_mode_hands_the_host() {
    require_root();
    let out = tempfile_dir();
    let o = std::process::Command::new(netdam_lab_bin())
        .args([
            "bench",
            "memwall",
            "--quick",
            "--json",
            "--prefix",
            &unique_prefix(),
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("run netdam-lab bench memwall");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "netdam-lab bench memwall --quick failed:\n{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert!(stderr.contains("no memory-controller counters") || r["hw_counters_missing"].is_null());
    let size = r["config"]["size"].as_f64().unwrap();
    let rows = r["bandwidth"].as_array().unwrap();
    let modes: Vec<&str> = rows.iter().map(|x| x["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["socket", "af_xdp", "write", "write_notify", "split"]);
    // Per message: the socket copies the payload; AF_XDP gets the frame from
    // IPv4 on (20 + 8 + 32 header bytes); WRITE nothing; WRITE_NOTIFY the
    // three headers; split Ethernet to UDP, 64 kept bytes and the descriptor.
    let want = [size, 60.0 + size, 0.0, 60.0, 14.0 + 28.0 + 64.0 + 16.0];
    for (row, want) in rows.iter().zip(want) {
        let mode = row["mode"].as_str().unwrap();
        assert!(
            row["delivered_per_s"].as_f64().unwrap() > 0.0,
            "{mode} delivered nothing: {row}"
        );
        assert!(row["sent_per_s"].as_f64().unwrap() > 0.0, "{mode}: nothing sent");
        assert!(row["triad_retained"].as_f64().unwrap() > 0.0);
        assert_eq!(
            row["host_bytes_per_message"].as_f64().unwrap(),
            want,
            "{mode}: bytes handed to the host"
        );
    }
    let holds = r["holds"].as_array().unwrap();
    let per_mode = r["config"]["holds_us"].as_array().unwrap().len();
    assert_eq!(holds.len(), 5 * per_mode, "a row per mode and hold time");
    for h in holds {
        let mode = h["mode"].as_str().unwrap();
        assert!(h["consumed_per_s"].as_f64().unwrap() > 0.0, "{h}");
        assert_eq!(h["read_ns_per_kib"].is_null(), mode == "write", "{h}");
    }
    for f in ["memwall.json", "memwall-bandwidth.svg", "memwall-holds.svg"] {
        assert!(out.join(f).exists(), "{f} written");
    }
    let _ = std::fs::remove_dir_all(&out);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("netdam-memwall-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
