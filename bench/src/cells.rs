//! The cells of the report's tables and the plot's labels: milliseconds,
//! ratios, sizes and counts as RESULTS.md and the SVG write them, for
//! [`crate::report`], the sections it renders ([`crate::multicall`],
//! [`crate::static_build`]) and [`crate::plot`].

use crate::stats::Samples;

/// Milliseconds, with fewer decimals the larger they are; "–" for none.
pub fn ms(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// The p50 and p90 of `s` in ms ("p50 / p90").
pub fn pair(s: &Samples) -> String {
    if s.is_empty() {
        return "–".into();
    }
    format!("{} / {}", ms(s.p50()), ms(s.p90()))
}

/// A ratio ("1.23x"); "–" for none.
pub fn x(r: Option<f64>) -> String {
    match r {
        None => "–".into(),
        Some(r) if r >= 10.0 => format!("{r:.1}x"),
        Some(r) => format!("{r:.2}x"),
    }
}

/// The p50 of `s` in ms with two decimals, for tables of close numbers.
pub fn p50_cell(s: &Samples) -> String {
    s.p50()
        .map(|v| format!("{v:.2}"))
        .unwrap_or_else(|| "–".into())
}

/// A ratio with three decimals, for comparisons of near-equal forms.
pub fn fine_ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.3}x")).unwrap_or_else(|| "–".into())
}

/// Bytes as megabytes (10^6).
pub fn megabytes(b: u64) -> String {
    format!("{:.2} MB", b as f64 / 1e6)
}

/// A count of KiB; "–" for none.
pub fn kib(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "–".into())
}

/// `n` with a comma every three digits.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(100), "100");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(10000), "10,000");
    }
}
