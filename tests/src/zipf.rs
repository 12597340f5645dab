//! Keys drawn with a skewed spread, as tenants or API keys are in use: a few hot, most rare.

/// Draws ranks `0..n` with a Zipf-like spread: rank `r` with a weight of `1 / (r + 1)^s`.
///
/// With `s = 1` over 1,200 keys, the hottest draws about one time in eight, the ten hottest
/// together about two in five, and each of the rarest about one in ten thousand.
pub struct Zipf {
    /// The weights summed up to each rank, the last one being their total.
    cumulative: Vec<f64>,
}

impl Zipf {
    /// Ranks `0..n` (at least one), with the exponent `s` (at least 0: 0 draws every rank
    /// alike).
    pub fn new(n: usize, s: f64) -> Self {
        assert!(n > 0 && s >= 0.0, "Zipf over {n} ranks with exponent {s}");
        let mut sum = 0.0;
        let cumulative = (0..n)
            .map(|r| {
                sum += 1.0 / ((r + 1) as f64).powf(s);
                sum
            })
            .collect();
        Self { cumulative }
    }

    /// How many ranks.
    pub fn len(&self) -> usize {
        self.cumulative.len()
    }

    /// Always false: a spread has at least one rank.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// One rank, drawn at random.
    pub fn sample(&self) -> usize {
        let x = fastrand::f64() * self.total();
        self.cumulative
            .partition_point(|c| *c <= x)
            .min(self.len() - 1)
    }

    /// The share of the draws rank `r` takes.
    pub fn share(&self, r: usize) -> f64 {
        let below = r.checked_sub(1).map_or(0.0, |b| self.cumulative[b]);
        (self.cumulative[r] - below) / self.total()
    }

    fn total(&self) -> f64 {
        self.cumulative[self.len() - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_ranks_are_hot_and_most_are_rare() {
        let zipf = Zipf::new(1200, 1.0);
        assert!((0.12..0.14).contains(&zipf.share(0)), "{}", zipf.share(0));
        let top_ten: f64 = (0..10).map(|r| zipf.share(r)).sum();
        assert!((0.35..0.45).contains(&top_ten), "{top_ten}");
        assert!(zipf.share(1199) < 0.000_2);
        let all: f64 = (0..1200).map(|r| zipf.share(r)).sum();
        assert!((all - 1.0).abs() < 1e-9);
    }

    #[test]
    fn draws_follow_the_shares() {
        let zipf = Zipf::new(1200, 1.0);
        let mut drawn = vec![0u32; zipf.len()];
        for _ in 0..100_000 {
            drawn[zipf.sample()] += 1;
        }
        // About 13,000 for the hottest, 6,500 for the next.
        assert!((11_000..15_000).contains(&drawn[0]), "{}", drawn[0]);
        assert!((5_000..8_000).contains(&drawn[1]), "{}", drawn[1]);
        let rare: u32 = drawn[600..].iter().sum();
        assert!((6_000..12_000).contains(&rare), "{rare}");
        let none = Zipf::new(3, 0.0);
        assert!((0..3).all(|r| (none.share(r) - 1.0 / 3.0).abs() < 1e-9));
    }
}
