//! Samples of one measured quantity (milliseconds or KiB) and the order
//! statistics the report prints: p50 and p90 by nearest rank.

/// The samples of one quantity, in the order they were taken.
#[derive(Debug, Clone, Default)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn push(&mut self, v: f64) {
        self.0.push(v);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `p`-quantile (0 < p <= 1) by nearest rank: the smallest sample
    /// with at least `p` of all samples at or below it. `None` when empty.
    pub fn quantile(&self, p: f64) -> Option<f64> {
        if self.0.is_empty() {
            return None;
        }
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        let rank = (p * sorted.len() as f64).ceil().max(1.0) as usize;
        Some(sorted[rank.min(sorted.len()) - 1])
    }

    pub fn p50(&self) -> Option<f64> {
        self.quantile(0.5)
    }

    pub fn p90(&self) -> Option<f64> {
        self.quantile(0.9)
    }

    pub fn max(&self) -> Option<f64> {
        self.0.iter().copied().reduce(f64::max)
    }

    /// A 95 % confidence interval of the median, from order statistics
    /// (no assumption on the distribution): the samples of ranks
    /// n/2 ∓ 0.98·√n. `None` under 6 samples, too few for one.
    pub fn median_interval(&self) -> Option<(f64, f64)> {
        let n = self.0.len();
        if n < 6 {
            return None;
        }
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        let half = 0.98 * (n as f64).sqrt();
        let lo = ((n as f64 / 2.0 - half).floor().max(1.0) as usize).min(n);
        let hi = ((n as f64 / 2.0 + half).ceil() as usize).clamp(1, n);
        Some((sorted[lo - 1], sorted[hi - 1]))
    }
}

/// `ours / reference`, when both exist and the reference is not zero.
pub fn ratio(ours: Option<f64>, reference: Option<f64>) -> Option<f64> {
    match (ours, reference) {
        (Some(o), Some(r)) if r > 0.0 => Some(o / r),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(v: &[f64]) -> Samples {
        let mut s = Samples::default();
        for x in v {
            s.push(*x);
        }
        s
    }

    #[test]
    fn nearest_rank_quantiles() {
        let s = of(&[5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 9.0, 8.0, 7.0, 6.0]);
        assert_eq!(s.p50(), Some(5.0));
        assert_eq!(s.p90(), Some(9.0));
        assert_eq!(s.max(), Some(10.0));
        assert_eq!(of(&[7.0]).p90(), Some(7.0));
        assert_eq!(of(&[1.0, 2.0]).p50(), Some(1.0));
        assert_eq!(of(&[]).p50(), None);
    }

    #[test]
    fn the_median_interval_narrows_with_samples() {
        let hundred = of(&(1..=100).map(f64::from).collect::<Vec<_>>());
        // Ranks 50 ∓ 9.8, rounded outwards: the 40th and the 60th.
        assert_eq!(hundred.median_interval(), Some((40.0, 60.0)));
        let many = of(&(1..=10_000).map(f64::from).collect::<Vec<_>>());
        assert_eq!(many.median_interval(), Some((4902.0, 5098.0)));
        assert_eq!(of(&[1.0, 2.0, 3.0]).median_interval(), None);
    }

    #[test]
    fn ratio_needs_both_sides() {
        assert_eq!(ratio(Some(1.0), Some(4.0)), Some(0.25));
        assert_eq!(ratio(None, Some(4.0)), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
    }
}
