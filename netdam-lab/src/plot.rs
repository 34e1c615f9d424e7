//! SVG line charts for benchmark sweeps: no plotting dependency, a file any
//! browser shows.

use std::fmt::Write as _;

/// One line of a chart.
pub struct Series {
    pub name: String,
    /// (x, y) points, x > 0 (the x axis is logarithmic, base 2).
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

/// A chart with a log2 x axis (labelled as byte sizes) and a linear y axis from 0.
pub fn svg(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0.log2()));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (x0, x1) = if x0 < x1 { (x0, x1) } else { (x0 - 1.0, x0 + 1.0) };
    let y1 = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE)
        * 1.1;
    let px = |x: f64| LEFT + (x.log2() - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - y / y1 * (H - TOP - BOTTOM);
    let mut s = open(H, title);
    let (bx, by) = (LEFT, H - BOTTOM);
    let _ = writeln!(
        s,
        r#"<path d="M{bx},{TOP} V{by} H{}" stroke="black" fill="none"/>"#,
        W - RIGHT
    );
    for i in 0..=4 {
        let y = y1 * i as f64 / 4.0;
        let _ = writeln!(
            s,
            r##"<line x1="{bx}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            bx - 6.0,
            py(y) + 4.0,
            short(y),
            py = py(y)
        );
    }
    let mut e = x0.ceil() as i64;
    let step = ((x1 - x0) / 8.0).ceil().max(1.0) as i64;
    while e as f64 <= x1 {
        let x = 2f64.powi(e as i32);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            px(x),
            by + 16.0,
            bytes(x)
        );
        e += step;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 10.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        (TOP + by) / 2.0,
        (TOP + by) / 2.0,
        esc(y_label)
    );
    for (k, ser) in series.iter().enumerate() {
        let c = COLOURS[k % COLOURS.len()];
        let d: Vec<String> = ser
            .points
            .iter()
            .enumerate()
            .map(|(i, &(x, y))| format!("{}{:.1},{:.1}", if i == 0 { "M" } else { "L" }, px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<path d="{}" stroke="{c}" stroke-width="2" fill="none"/>"#,
            d.join(" ")
        );
        for &(x, y) in &ser.points {
            let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#, px(x), py(y));
        }
        let ly = TOP + 10.0 + 18.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{}" width="12" height="3" fill="{c}"/><text x="{}" y="{}">{}</text>"#,
            W - RIGHT + 12.0,
            ly - 4.0,
            W - RIGHT + 30.0,
            ly,
            esc(&ser.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Two groups of horizontal bars, each scaled to its own largest value,
/// with the values written beside them: for a benchmark of a few figures.
pub fn bars(title: &str, top: &[(&str, f64)], bottom: &[(&str, f64)]) -> String {
    const ROW: f64 = 26.0;
    let rows = (top.len() + bottom.len()) as f64;
    let h = TOP + ROW * rows + 30.0 + BOTTOM;
    let mut s = open(h, title);
    let mut y = TOP;
    for (k, group) in [top, bottom].into_iter().enumerate() {
        let max = group.iter().map(|b| b.1).fold(0.0, f64::max).max(f64::MIN_POSITIVE);
        for (i, (name, v)) in group.iter().enumerate() {
            let len = v / max * (W - 2.0 * LEFT - RIGHT);
            let c = COLOURS[(i + 3 * k) % COLOURS.len()];
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text><rect x="{}" y="{:.1}" width="{len:.1}" height="{}" fill="{c}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                2.0 * LEFT - 8.0,
                y + 15.0,
                esc(name),
                2.0 * LEFT,
                y + 3.0,
                ROW - 8.0,
                2.0 * LEFT + len + 6.0,
                y + 15.0,
                short(*v)
            );
            y += ROW;
        }
        y += 30.0;
    }
    s.push_str("</svg>\n");
    s
}

/// An SVG document `h` high with a white background and `title` on top.
fn open(h: f64, title: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    s
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// 4 B, 64 KiB, 16 MiB.
fn bytes(x: f64) -> String {
    let units = [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (u, name) in units {
        if x >= u as f64 {
            return format!("{}{name}", x / u as f64);
        }
    }
    format!("{x}B")
}

/// A y tick value with few digits.
fn short(y: f64) -> String {
    if y == 0.0 {
        "0".into()
    } else if y >= 100.0 {
        format!("{y:.0}")
    } else if y >= 1.0 {
        format!("{y:.1}")
    } else {
        format!("{y:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_every_point_and_legend() {
        let s = svg(
            "busbw",
            "size",
            "GB/s",
            &[
                Series {
                    name: "NetDAM".into(),
                    points: vec![(4.0, 0.01), (1024.0, 0.2), (1048576.0, 1.5)],
                },
                Series {
                    name: "MPI <tcp>".into(),
                    points: vec![(4.0, 0.02)],
                },
            ],
        );
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert_eq!(s.matches("<circle").count(), 4);
        assert!(s.contains(">NetDAM<") && s.contains("MPI &lt;tcp&gt;"));
        assert!(s.contains(">1MiB<") && s.contains(">4B<"));
    }

    #[test]
    fn bars_scale_each_group_to_its_largest() {
        let s = bars("t", &[("a", 10.0), ("b", 5.0)], &[("c", 2.0)]);
        assert_eq!(s.matches("<rect x=").count(), 3);
        // Full width (720 - 140 - 170 = 410) for the largest of each group, half for b.
        assert_eq!(s.matches(r#"width="410.0""#).count(), 2);
        assert!(s.contains(r#"width="205.0""#));
        assert!(s.contains(">10.0<") && s.contains(">2.0<"));
    }
}
