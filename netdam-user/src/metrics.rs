//! `netdam serve --metrics ADDR`: the data path's counters and the node's
//! gauges at `GET /metrics`, in the Prometheus text exposition format 0.0.4.
//! A small HTTP/1.1 server: one request per connection, a bounded request
//! head, a deadline per connection and a bounded number of connections, so
//! that a slow or hostile client costs a socket for a few seconds at most.

use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

use aya::maps::{HashMap as BpfHashMap, Map, MapData, PerCpuArray};
use netdam_common::{
    counters::{op_slot_name, Event, OP_SLOTS, STATUS_SLOTS},
    window::{SourceKey, Window},
    Status,
};
use thiserror::Error;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};

use crate::{
    controller::{sum_counters, ControllerError, MAP_COUNTERS, MAP_WINDOWS},
    stats::ALARMS,
};

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The longest request head read; a longer one is answered 431.
pub const MAX_REQUEST: usize = 8 << 10;
/// How long a connection may take to send its request and take the answer.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once; more wait in the kernel's accept queue.
pub const MAX_CONNECTIONS: usize = 16;

#[derive(Debug, Error)]
pub enum MetricsError {
    #[error("--metrics {addr}: cannot listen there: {source} (is another process on that port, or is the address not on this host?)")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What the serve loop knows and the counters do not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    pub mem_bytes: u64,
    pub regions: u64,
    pub peers: u64,
    /// Peers with a complete neighbour entry: bound to their MAC, so served and forwarded to.
    pub peers_resolved: u64,
    pub reloads: u64,
    pub reload_failures: u64,
    /// Unix time of the last successful (re)configuration.
    pub config_time: u64,
}

/// One scrape: the counters (summed over CPUs, `COUNTER_SLOTS` of them),
/// the at-most-once windows in use and the gauges.
pub struct Scrape<'a> {
    pub iface: &'a str,
    pub counters: &'a [u64],
    pub windows: u64,
    pub gauges: &'a Gauges,
}

/// A label value, escaped as the format wants (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Writes one metric family: HELP, TYPE, then its samples (labels besides iface, value).
fn family(out: &mut String, name: &str, kind: &str, help: &str, iface: &str, samples: &[(String, u64)]) {
    out.push_str(&format!(
        "# HELP {name} {}\n# TYPE {name} {kind}\n",
        help.replace('\\', "\\\\").replace('\n', "\\n")
    ));
    for (labels, value) in samples {
        out.push_str(&format!("{name}{{iface=\"{}\"{labels}}} {value}\n", label(iface)));
    }
}

/// The exposition of one scrape.
pub fn render(s: &Scrape) -> String {
    let mut out = String::new();
    let at = |i: u32| s.counters.get(i as usize).copied().unwrap_or(0);
    // Every (opcode, status), zeros too, so that rates start from the first scrape.
    let mut requests = Vec::new();
    for slot in 0..OP_SLOTS {
        for st in Status::ALL {
            requests.push((
                format!(",op=\"{}\",status=\"{}\"", op_slot_name(slot), st.name()),
                at(slot * STATUS_SLOTS + *st as u32),
            ));
        }
    }
    family(
        &mut out,
        "netdam_requests_total",
        "counter",
        "Requests the data path validated, by opcode and the status it answered (netdam stats).",
        s.iface,
        &requests,
    );
    for e in Event::ALL {
        let help = ALARMS.iter().find(|(a, _)| a == e).map_or_else(
            || format!("Frames counted as {} by the data path (netdam stats).", e.name()),
            |(_, m)| format!("ALARM when it rises: {m} (netdam stats)."),
        );
        family(
            &mut out,
            &format!("netdam_{}_total", e.name()),
            "counter",
            &help,
            s.iface,
            &[(String::new(), at(*e as u32))],
        );
    }
    let g = s.gauges;
    let mut gauge =
        |name: &str, help: &str, v: u64| family(&mut out, name, "gauge", help, s.iface, &[(String::new(), v)]);
    gauge("netdam_up", "1 while netdam serve serves this interface.", 1);
    gauge(
        "netdam_memory_bytes",
        "Bytes of NetDAM memory (--mem-size).",
        g.mem_bytes,
    );
    gauge("netdam_regions", "Regions in the region table.", g.regions);
    gauge("netdam_peers", "Peers in the peer table.", g.peers);
    gauge(
        "netdam_peers_resolved",
        "Peers whose MAC the neighbour table has (served and forwarded to; the others wait for ARP).",
        g.peers_resolved,
    );
    gauge("netdam_windows", "Sources holding an at-most-once window.", s.windows);
    gauge(
        "netdam_config_timestamp_seconds",
        "Unix time of the last successful configuration (start or reload).",
        g.config_time,
    );
    let mut counter =
        |name: &str, help: &str, v: u64| family(&mut out, name, "counter", help, s.iface, &[(String::new(), v)]);
    counter("netdam_config_reloads_total", "Reloads (SIGHUP) applied.", g.reloads);
    counter(
        "netdam_config_reload_failures_total",
        "Reloads (SIGHUP) refused: an invalid config, or a change that needs a restart.",
        g.reload_failures,
    );
    family(
        &mut out,
        "netdam_build_info",
        "gauge",
        "The netdam version serving.",
        s.iface,
        &[(format!(",version=\"{}\"", label(env!("CARGO_PKG_VERSION"))), 1)],
    );
    out
}

/// The counters and the windows in use of the node pinned in `pin_dir`.
pub fn read_pinned(pin_dir: &Path) -> Result<(Vec<u64>, u64), ControllerError> {
    let data = MapData::from_pin(pin_dir.join(MAP_COUNTERS)).map_err(|e| ControllerError::Map(MAP_COUNTERS, e))?;
    let arr: PerCpuArray<MapData, u64> =
        PerCpuArray::try_from(Map::PerCpuArray(data)).map_err(|e| ControllerError::Map(MAP_COUNTERS, e))?;
    let counters = sum_counters(&arr)?;
    let data = MapData::from_pin(pin_dir.join(MAP_WINDOWS)).map_err(|e| ControllerError::Map(MAP_WINDOWS, e))?;
    let windows: BpfHashMap<MapData, SourceKey, Window> =
        BpfHashMap::try_from(Map::HashMap(data)).map_err(|e| ControllerError::Map(MAP_WINDOWS, e))?;
    // Keys only: walking them reads no 16 KiB window.
    Ok((counters, windows.keys().filter(Result::is_ok).count() as u64))
}

/// Listens on `addr` (before serving, so that a bad address stops serve at once).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, MetricsError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError::Bind { addr, source })
}

/// Serves `GET /metrics` on `listener` with the text `scrape` makes, until dropped.
pub async fn serve<F>(listener: TcpListener, scrape: F)
where
    F: Fn() -> Result<String, String> + Send + Sync + 'static,
{
    let scrape = Arc::new(scrape);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                log::warn!("metrics: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let scrape = scrape.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(CONNECTION_DEADLINE, answer(stream, &*scrape)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log::debug!("metrics: {peer}: {e}"),
                Err(_) => log::debug!("metrics: {peer}: no request within {CONNECTION_DEADLINE:?}"),
            }
        });
    }
}

/// Reads one request head and answers it.
async fn answer(
    mut stream: TcpStream,
    scrape: &(dyn Fn() -> Result<String, String> + Send + Sync),
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let complete = loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if head.len() >= MAX_REQUEST {
            break false;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    };
    let response = if complete {
        respond(&head, scrape)
    } else {
        Response::text(431, "Request Header Fields Too Large", "request head too large\n")
    };
    stream.write_all(&response.bytes()).await?;
    stream.shutdown().await
}

/// An HTTP answer.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub reason: &'static str,
    pub content_type: &'static str,
    pub extra: &'static str,
    pub body: String,
}

impl Response {
    fn text(status: u16, reason: &'static str, body: &str) -> Response {
        Response {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            extra: "",
            body: body.to_string(),
        }
    }

    pub fn bytes(&self) -> Vec<u8> {
        format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n{}",
            self.status,
            self.reason,
            self.content_type,
            self.body.len(),
            self.extra,
            self.body
        )
        .into_bytes()
    }
}

/// The answer to a complete request head.
pub fn respond(head: &[u8], scrape: &(dyn Fn() -> Result<String, String> + Send + Sync)) -> Response {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end().split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Response::text(400, "Bad Request", "not an HTTP request\n");
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Response::text(400, "Bad Request", "not an HTTP/1.x request\n");
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return Response::text(404, "Not Found", "only /metrics is here\n");
    }
    if method != "GET" {
        return Response {
            extra: "Allow: GET\r\n",
            ..Response::text(405, "Method Not Allowed", "only GET\n")
        };
    }
    match scrape() {
        Ok(body) => Response {
            content_type: CONTENT_TYPE,
            ..Response::text(200, "OK", &body)
        },
        Err(e) => Response::text(500, "Internal Server Error", &format!("reading the counters: {e}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netdam_common::counters::{op_status, COUNTER_SLOTS};

    fn sample() -> String {
        let mut c = vec![0u64; COUNTER_SLOTS as usize];
        c[op_status(1, Status::Ok) as usize] = 5;
        c[Event::DropBadMagic as usize] = 7;
        c[Event::BadKeyLimited as usize] = 2;
        let g = Gauges {
            mem_bytes: 64 << 20,
            regions: 2,
            peers: 3,
            peers_resolved: 1,
            reloads: 4,
            reload_failures: 1,
            config_time: 1_800_000_000,
        };
        render(&Scrape {
            iface: "eth\"0",
            counters: &c,
            windows: 9,
            gauges: &g,
        })
    }

    #[test]
    fn every_counter_is_a_family_with_help_and_type() {
        let text = sample();
        assert!(text.contains("netdam_requests_total{iface=\"eth\\\"0\",op=\"WRITE\",status=\"OK\"} 5\n"));
        assert!(text.contains("netdam_requests_total{iface=\"eth\\\"0\",op=\"READ\",status=\"OK\"} 0\n"));
        assert!(text.contains(
            "# HELP netdam_drop_bad_magic_total Frames counted as drop_bad_magic by the data path (netdam stats).\n\
             # TYPE netdam_drop_bad_magic_total counter\n\
             netdam_drop_bad_magic_total{iface=\"eth\\\"0\"} 7\n"
        ));
        assert!(text.contains("# HELP netdam_bad_key_limited_total ALARM when it rises: BAD_KEY answers refused"));
        for (name, v) in [
            ("netdam_memory_bytes", "67108864"),
            ("netdam_regions", "2"),
            ("netdam_peers", "3"),
            ("netdam_peers_resolved", "1"),
            ("netdam_windows", "9"),
            ("netdam_up", "1"),
            ("netdam_config_reloads_total", "4"),
            ("netdam_config_reload_failures_total", "1"),
            ("netdam_config_timestamp_seconds", "1800000000"),
        ] {
            assert!(
                text.contains(&format!("\n{name}{{iface=\"eth\\\"0\"}} {v}\n")),
                "{name}"
            );
        }
        assert!(text.contains(&format!(
            "netdam_build_info{{iface=\"eth\\\"0\",version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
        // One HELP and one TYPE per family, each family's samples together, every
        // sample line `name{labels} integer`, and counters end in _total.
        let mut families = Vec::new();
        let mut kind = "";
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(!families.contains(&name.to_string()), "{name} twice");
                families.push(name.to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, k) = rest.split_once(' ').unwrap();
                assert_eq!(name, families.last().unwrap());
                kind = if k == "counter" { "counter" } else { "gauge" };
                assert!(matches!(k, "counter" | "gauge"), "{line}");
            } else {
                let (name_labels, value) = line.rsplit_once(' ').unwrap();
                let name = name_labels.split('{').next().unwrap();
                assert_eq!(name, families.last().unwrap(), "{line}");
                assert!(name_labels.ends_with('}'), "{line}");
                value.parse::<u64>().unwrap();
                assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
            }
        }
        assert_eq!(families.len(), Event::ALL.len() + 11);
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn only_get_metrics_is_answered() {
        let ok = || Ok("x 1\n".to_string());
        let r = respond(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", &ok);
        assert_eq!(
            (r.status, r.content_type, r.body.as_str()),
            (200, CONTENT_TYPE, "x 1\n")
        );
        let bytes = String::from_utf8(r.bytes()).unwrap();
        assert_eq!(
            bytes,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: 4\r\n\
             Connection: close\r\n\r\nx 1\n"
        );
        assert_eq!(respond(b"GET /metrics?name[]=x HTTP/1.0\r\n\r\n", &ok).status, 200);
        assert_eq!(respond(b"GET / HTTP/1.1\r\n\r\n", &ok).status, 404);
        assert_eq!(respond(b"GET /metricsx HTTP/1.1\r\n\r\n", &ok).status, 404);
        let post = respond(b"POST /metrics HTTP/1.1\r\n\r\n", &ok);
        assert_eq!((post.status, post.extra), (405, "Allow: GET\r\n"));
        assert_eq!(respond(b"hello\r\n\r\n", &ok).status, 400);
        assert_eq!(respond(b"GET /metrics SPDY/3\r\n\r\n", &ok).status, 400);
        let failing = || Err("gone".to_string());
        let r = respond(b"GET /metrics HTTP/1.1\r\n\r\n", &failing);
        assert_eq!((r.status, r.body.as_str()), (500, "reading the counters: gone\n"));
    }

    #[tokio::test]
    async fn the_server_answers_and_bounds_requests() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, || Ok("netdam_up 1\n".to_string())));
        let exchange = |request: Vec<u8>| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&request).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let ok = exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()).await;
        assert!(
            ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("\r\n\r\nnetdam_up 1\n"),
            "{ok}"
        );
        assert!(exchange(b"GET /x HTTP/1.1\r\n\r\n".to_vec())
            .await
            .starts_with("HTTP/1.1 404 "));
        let huge = [b"GET /metrics HTTP/1.1\r\nX: ".to_vec(), vec![b'a'; MAX_REQUEST]].concat();
        assert!(exchange(huge).await.starts_with("HTTP/1.1 431 "));
        // A client that sends nothing is let go; the server still answers others meanwhile.
        let silent = TcpStream::connect(addr).await.unwrap();
        assert!(exchange(b"GET /metrics HTTP/1.1\r\n\r\n".to_vec())
            .await
            .starts_with("HTTP/1.1 200 "));
        drop(silent);
        server.abort();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = bind(taken.local_addr().unwrap()).await.unwrap_err().to_string();
        assert!(
            e.contains("cannot listen there: Address in use")
                || e.contains("cannot listen there: Address already in use"),
            "{e}"
        );
    }
}
