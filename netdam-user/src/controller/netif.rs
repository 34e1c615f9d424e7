//! Facts about a network interface, read through netlink-backed libc calls
//! (not /sys, which can describe another network namespace).

use std::{ffi::CString, net::Ipv4Addr};

use nix::{ifaddrs::getifaddrs, sys::socket::SockaddrLike};

use super::ControllerError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub index: u32,
    pub mac: [u8; 6],
    /// The first IPv4 address of the interface, if any.
    pub ipv4: Option<Ipv4Addr>,
    pub mtu: u32,
}

impl Interface {
    pub fn lookup(name: &str) -> Result<Interface, ControllerError> {
        let unknown = || ControllerError::UnknownInterface(name.to_string());
        let c = CString::new(name).map_err(|_| unknown())?;
        // SAFETY: a NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if index == 0 {
            return Err(unknown());
        }
        let mut mac = None;
        let mut ipv4 = None;
        for a in getifaddrs().map_err(|e| ControllerError::Io("getifaddrs".into(), e.into()))? {
            if a.interface_name != name {
                continue;
            }
            let Some(addr) = a.address else { continue };
            if let Some(link) = addr.as_link_addr() {
                mac = link.addr();
            } else if let Some(sin) = addr.as_sockaddr_in() {
                ipv4.get_or_insert(sin.ip());
            }
            let _ = addr.family();
        }
        Ok(Interface {
            name: name.to_string(),
            index,
            mac: mac.unwrap_or_default(),
            ipv4,
            mtu: mtu(&c)?,
        })
    }
}

/// The interface that holds `ip`, named.
pub fn holding(ip: Ipv4Addr) -> Result<Option<String>, ControllerError> {
    Ok(getifaddrs()
        .map_err(|e| ControllerError::Io("getifaddrs".into(), e.into()))?
        .find(|a| a.address.and_then(|s| s.as_sockaddr_in().map(|sin| sin.ip())) == Some(ip))
        .map(|a| a.interface_name))
}

fn mtu(name: &CString) -> Result<u32, ControllerError> {
    // SAFETY: a UDP socket for the ioctl, closed before return; ifreq is
    // zeroed and holds the NUL-terminated name (checked to fit).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(ControllerError::Io("socket".into(), std::io::Error::last_os_error()));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        let bytes = name.as_bytes_with_nul();
        if bytes.len() > req.ifr_name.len() {
            libc::close(fd);
            return Err(ControllerError::UnknownInterface(name.to_string_lossy().into()));
        }
        for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        let r = libc::ioctl(fd, libc::SIOCGIFMTU, &mut req);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if r < 0 {
            return Err(ControllerError::Io("SIOCGIFMTU".into(), err));
        }
        Ok(req.ifr_ifru.ifru_mtu as u32)
    }
}
