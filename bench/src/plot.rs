//! The plot of the scaling sweep, as SVG written by hand: one panel per
//! sweep, latency (p50, with a whisker up to p90) of ADD and DEL against
//! what is present, ours against the reference, both axes log scale
//! (0 present is drawn one decade left of the first non-zero level, after
//! an axis break).

use crate::cells::thousands;
use crate::stats::Samples;
use crate::sweep::{Level, Sweep};
use std::fmt::Write;

const PANEL_W: f64 = 460.0;
const PANEL_H: f64 = 340.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 52.0;
const HEADER: f64 = 70.0;

const OURS: &str = "#1f6fb4";
const REFERENCE: &str = "#d9541e";

struct Series {
    label: &'static str,
    color: &'static str,
    dashed: bool,
    square: bool,
    /// Horizontal offset, so ours and the reference do not hide each other.
    dx: f64,
    pick: fn(&crate::sweep::Level) -> &Samples,
}

fn series() -> [Series; 4] {
    [
        Series {
            label: "ours ADD",
            color: OURS,
            dashed: false,
            square: false,
            dx: -3.0,
            pick: |l| &l.ours_add,
        },
        Series {
            label: "ours DEL",
            color: OURS,
            dashed: true,
            square: true,
            dx: -3.0,
            pick: |l| &l.ours_del,
        },
        Series {
            label: "reference ADD",
            color: REFERENCE,
            dashed: false,
            square: false,
            dx: 3.0,
            pick: |l| &l.ref_add,
        },
        Series {
            label: "reference DEL",
            color: REFERENCE,
            dashed: true,
            square: true,
            dx: 3.0,
            pick: |l| &l.ref_del,
        },
    ]
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG document for `sweeps` (two panels per row).
pub fn svg(sweeps: &[Sweep], subtitle: &str) -> String {
    let cols = 2usize;
    let rows = sweeps.len().div_ceil(cols).max(1);
    let width = PANEL_W * cols as f64;
    let height = HEADER + PANEL_H * rows as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">Latency of one more ADD / DEL against what the node already has (p50, whisker to p90)</text>"#,
        width / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="40" text-anchor="middle" font-size="11" fill="#444">{}</text>"##,
        width / 2.0,
        esc(subtitle)
    );
    // Legend.
    let mut lx = width / 2.0 - 300.0;
    for se in series() {
        let y = 58.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2"{}/>"#,
            lx + 30.0,
            se.color,
            if se.dashed {
                r#" stroke-dasharray="6,4""#
            } else {
                ""
            }
        );
        marker(&mut s, lx + 15.0, y, se.color, se.square);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            lx + 36.0,
            y + 4.0,
            se.label
        );
        lx += 150.0;
    }
    for (i, sweep) in sweeps.iter().enumerate() {
        let ox = PANEL_W * (i % cols) as f64;
        let oy = HEADER + PANEL_H * (i / cols) as f64;
        panel(&mut s, sweep, ox, oy);
    }
    s.push_str("</svg>\n");
    s
}

fn marker(s: &mut String, x: f64, y: f64, color: &str, square: bool) {
    if square {
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="white" stroke="{color}" stroke-width="1.6"/>"#,
            x - 3.5,
            y - 3.5
        );
    } else {
        let _ = writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.8" fill="{color}"/>"#
        );
    }
}

/// The x position (in decades) of `present`: log10, with 0 one decade
/// left of the smallest non-zero level.
fn decade(present: usize, first_nonzero: usize) -> f64 {
    if present == 0 {
        (first_nonzero.max(1) as f64).log10() - 1.0
    } else {
        (present as f64).log10()
    }
}

fn panel(s: &mut String, sweep: &Sweep, ox: f64, oy: f64) {
    let x0 = ox + LEFT;
    let x1 = ox + PANEL_W - RIGHT;
    let y0 = oy + TOP;
    let y1 = oy + PANEL_H - BOTTOM;
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="12" font-weight="bold">{}</text>"#,
        (x0 + x1) / 2.0,
        oy + 22.0,
        esc(&sweep.title)
    );
    let _ = writeln!(
        s,
        r##"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>"##,
        x1 - x0,
        y1 - y0
    );
    let levels: Vec<_> = sweep
        .levels
        .iter()
        .filter(|l| !l.ours_add.is_empty() || !l.ref_add.is_empty())
        .collect();
    if levels.is_empty() {
        let why = sweep.problem.as_deref().unwrap_or("no data");
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#900">not measured: {}</text>"##,
            (x0 + x1) / 2.0,
            (y0 + y1) / 2.0,
            esc(why)
        );
        return;
    }
    let frame = Frame::new(&levels, x0, x1, y0, y1);
    y_grid(s, &frame);
    x_axis(s, &frame, &levels, sweep, ox);
    series_lines(s, &frame, &levels);
}

/// A panel's plotting area and its log scales.
struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    first_nonzero: usize,
    dmin: f64,
    dmax: f64,
    ylo: f64,
    yhi: f64,
}

/// Room left and right of the outer levels, in decades.
const PAD: f64 = 0.25;

impl Frame {
    fn new(levels: &[&Level], x0: f64, x1: f64, y0: f64, y1: f64) -> Frame {
        let first_nonzero = levels
            .iter()
            .map(|l| l.present)
            .filter(|&p| p > 0)
            .min()
            .unwrap_or(10);
        let dmin = levels
            .iter()
            .map(|l| decade(l.present, first_nonzero))
            .fold(f64::INFINITY, f64::min);
        let dmax = levels
            .iter()
            .map(|l| decade(l.present, first_nonzero))
            .fold(f64::NEG_INFINITY, f64::max)
            .max(dmin + 1.0);

        // y range over every p50 and p90 shown.
        let mut lo = f64::INFINITY;
        let mut hi: f64 = 0.0;
        for l in levels {
            for se in series() {
                let samples = (se.pick)(l);
                for v in [samples.p50(), samples.p90()].into_iter().flatten() {
                    if v > 0.0 {
                        lo = lo.min(v);
                        hi = hi.max(v);
                    }
                }
            }
        }
        if !lo.is_finite() || hi <= 0.0 {
            lo = 1.0;
            hi = 10.0;
        }
        let ylo = (lo * 0.8).log10().floor();
        let yhi = (hi * 1.25).log10().ceil().max(ylo + 1.0);
        Frame {
            x0,
            x1,
            y0,
            y1,
            first_nonzero,
            dmin,
            dmax,
            ylo,
            yhi,
        }
    }

    /// The x of `present` items already there.
    fn xpos(&self, present: usize) -> f64 {
        let d = decade(present, self.first_nonzero);
        self.x0 + (d - self.dmin + PAD) / (self.dmax - self.dmin + 2.0 * PAD) * (self.x1 - self.x0)
    }

    /// The y of `v` ms.
    fn ypos(&self, v: f64) -> f64 {
        self.y1 - (v.log10() - self.ylo) / (self.yhi - self.ylo) * (self.y1 - self.y0)
    }
}

/// The y grid: 1, 2, 5 per decade.
fn y_grid(s: &mut String, f: &Frame) {
    let (x0, x1) = (f.x0, f.x1);
    let mut e = f.ylo as i32;
    while (e as f64) <= f.yhi {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(e);
            let lv = v.log10();
            if lv < f.ylo - 1e-9 || lv > f.yhi + 1e-9 {
                continue;
            }
            let y = f.ypos(v);
            let major = m == 1.0;
            let _ = writeln!(
                s,
                r#"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="{}" stroke-width="1"/>"#,
                if major { "#ccc" } else { "#e8e8e8" }
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"#,
                x0 - 6.0,
                y + 4.0,
                fmt_ms(v)
            );
        }
        e += 1;
    }
}

/// The x ticks at the levels, the axis break before the first non-zero
/// level, the axis titles.
fn x_axis(s: &mut String, f: &Frame, levels: &[&Level], sweep: &Sweep, ox: f64) {
    let (x0, x1, y0, y1) = (f.x0, f.x1, f.y0, f.y1);
    for l in levels {
        let x = f.xpos(l.present);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{y1}" x2="{x:.1}" y2="{}" stroke="#666"/>"##,
            y1 + 5.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{}" text-anchor="middle" font-size="11">{}</text>"#,
            y1 + 18.0,
            thousands(l.present as u64)
        );
    }
    // The axis break between 0 and the first non-zero level.
    if levels.iter().any(|l| l.present == 0) {
        let xb = (f.xpos(0) + f.xpos(f.first_nonzero)) / 2.0;
        for dx in [-3.0, 3.0] {
            let _ = writeln!(
                s,
                r##"<line x1="{:.1}" y1="{}" x2="{:.1}" y2="{}" stroke="#333" stroke-width="1.2"/>"##,
                xb + dx - 3.0,
                y1 + 5.0,
                xb + dx + 3.0,
                y1 - 5.0
            );
        }
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{} already present (log scale)</text>"#,
        (x0 + x1) / 2.0,
        y1 + 38.0,
        sweep.unit
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate({},{}) rotate(-90)" text-anchor="middle">latency, ms (log scale)</text>"#,
        ox + 16.0,
        (y0 + y1) / 2.0
    );
}

/// Each series: its p50 line, p90 whiskers and markers.
fn series_lines(s: &mut String, f: &Frame, levels: &[&Level]) {
    for se in series() {
        let points: Vec<(f64, f64, Option<f64>)> = levels
            .iter()
            .filter_map(|l| {
                let samples = (se.pick)(l);
                let p50 = samples.p50()?;
                Some((
                    f.xpos(l.present) + se.dx,
                    f.ypos(p50.max(1e-3)),
                    samples.p90().map(|v| f.ypos(v.max(1e-3))),
                ))
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        let path: Vec<String> = points
            .iter()
            .map(|(x, y, _)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>"#,
            path.join(" "),
            se.color,
            if se.dashed {
                r#" stroke-dasharray="6,4""#
            } else {
                ""
            }
        );
        for (x, y, p90) in &points {
            if let Some(yt) = p90 {
                let _ = writeln!(
                    s,
                    r#"<line x1="{x:.1}" y1="{y:.1}" x2="{x:.1}" y2="{yt:.1}" stroke="{}" stroke-width="1.2"/>"#,
                    se.color
                );
                let _ = writeln!(
                    s,
                    r#"<line x1="{:.1}" y1="{yt:.1}" x2="{:.1}" y2="{yt:.1}" stroke="{}" stroke-width="1.2"/>"#,
                    x - 4.0,
                    x + 4.0,
                    se.color
                );
            }
            marker(s, *x, *y, se.color, se.square);
        }
    }
}

fn fmt_ms(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else if v >= 0.1 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::Level;

    #[test]
    fn zero_sits_one_decade_left() {
        assert_eq!(decade(0, 100), 1.0);
        assert_eq!(decade(1000, 100), 3.0);
    }

    #[test]
    fn svg_is_one_document_with_every_panel() {
        let mut l = Level::default();
        l.ours_add.push(2.0);
        l.ref_add.push(20.0);
        let sweep = Sweep {
            title: "a & b".into(),
            unit: "pods",
            levels: vec![l],
            problem: None,
        };
        let skipped = Sweep {
            title: "c".into(),
            unit: "pods",
            levels: vec![],
            problem: Some("not built yet".into()),
        };
        let doc = svg(&[sweep, skipped], "sub");
        assert!(doc.starts_with("<svg") && doc.ends_with("</svg>\n"));
        assert!(doc.contains("a &amp; b"));
        assert!(doc.contains("not measured: not built yet"));
    }
}
