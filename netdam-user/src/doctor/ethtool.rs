//! The ethtool ioctls doctor reads (SIOCETHTOOL): driver, channels and
//! features. The socket, and so the device looked up, is of the calling
//! thread's network namespace.

use std::{ffi::c_void, io};

use super::drivers::Channels;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// Runs the ethtool command whose struct `data` points at on `iface`.
fn ethtool(iface: &str, data: *mut c_void) -> io::Result<()> {
    // SAFETY: a zeroed ifreq holding the NUL-terminated name (checked to
    // fit) and a pointer to the caller's command struct, which the kernel
    // reads and fills within its size; the socket is closed before return.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        if iface.len() >= req.ifr_name.len() {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        for (d, s) in req.ifr_name.iter_mut().zip(iface.as_bytes()) {
            *d = *s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = data.cast();
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
        let err = io::Error::last_os_error();
        libc::close(fd);
        if r < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// A C string field of a struct the kernel filled.
fn c_string(b: &[u8]) -> String {
    String::from_utf8_lossy(b.split(|c| *c == 0).next().unwrap_or_default()).into_owned()
}

/// The driver's name and bus address (ETHTOOL_GDRVINFO).
pub fn driver(iface: &str) -> io::Result<(String, String)> {
    // struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32],
    // bus_info[32], erom_version[32], reserved2[12], five u32 counts.
    let mut info = [0u32; 49];
    info[0] = ETHTOOL_GDRVINFO;
    ethtool(iface, info.as_mut_ptr().cast())?;
    let bytes: Vec<u8> = info.iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok((c_string(&bytes[4..36]), c_string(&bytes[100..132])))
}

/// Channel counts (ETHTOOL_GCHANNELS).
pub fn channels(iface: &str) -> io::Result<Channels> {
    // struct ethtool_channels: cmd, max_rx, max_tx, max_other, max_combined,
    // rx_count, tx_count, other_count, combined_count.
    let mut c = [0u32; 9];
    c[0] = ETHTOOL_GCHANNELS;
    ethtool(iface, c.as_mut_ptr().cast())?;
    Ok(Channels {
        max_rx: c[1],
        max_tx: c[2],
        max_combined: c[4],
        rx: c[5],
        tx: c[6],
        combined: c[8],
    })
}

/// A feature's state (ETHTOOL_GFEATURES).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feature {
    /// What the user asked for (veth decides on NAPI by this).
    pub requested: bool,
    pub active: bool,
}

/// The device's features by the kernel's names, e.g. "rx-lro" (ethtool -k
/// shows it as large-receive-offload).
pub fn features(iface: &str) -> io::Result<Vec<(String, Feature)>> {
    // struct ethtool_sset_info: cmd, reserved, sset_mask (u64), data[1].
    let mut info = [0u32; 5];
    info[0] = ETHTOOL_GSSET_INFO;
    let mask = 1u64 << ETH_SS_FEATURES;
    info[2..4].copy_from_slice(&[mask as u32, (mask >> 32) as u32]);
    if cfg!(target_endian = "big") {
        info.swap(2, 3);
    }
    ethtool(iface, info.as_mut_ptr().cast())?;
    let count = info[4] as usize;
    // struct ethtool_gstrings: cmd, string_set, len, data[len][32].
    let mut strings = vec![0u32; 3 + count * ETH_GSTRING_LEN / 4];
    strings[..3].copy_from_slice(&[ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count as u32]);
    ethtool(iface, strings.as_mut_ptr().cast())?;
    let names: Vec<u8> = strings[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    // struct ethtool_gfeatures: cmd, size, then per 32 features: available,
    // requested, active, never_changed.
    let blocks = count.div_ceil(32);
    let mut feats = vec![0u32; 2 + blocks * 4];
    feats[..2].copy_from_slice(&[ETHTOOL_GFEATURES, blocks as u32]);
    ethtool(iface, feats.as_mut_ptr().cast())?;
    Ok((0..count)
        .map(|i| {
            let block = &feats[2 + (i / 32) * 4..];
            let bit = 1u32 << (i % 32);
            (
                c_string(&names[i * ETH_GSTRING_LEN..(i + 1) * ETH_GSTRING_LEN]),
                Feature {
                    requested: block[1] & bit != 0,
                    active: block[2] & bit != 0,
                },
            )
        })
        .collect())
}
