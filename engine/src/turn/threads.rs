//! Adaptive compute threads (`--adaptive-threads`): which thread count the next decoded token
//! runs with.
//!
//! ggml's threadpool meets at a spinning barrier after every op, so a compute thread that the
//! scheduler gives to other work holds every other thread until it runs again. On a busy phone
//! or laptop `-t` = the core count can then be several times slower than one thread
//! (bench-data/2026-12-01-threads), while on an idle machine it is the faster choice. The right
//! count changes as the device's load does, so it is measured, token by token: the governor
//! runs the best-known count and now and then lets one token run with another (a probe). Each
//! count is judged by the **mean** compute time of its last [`WINDOW`] tokens, not a median:
//! under contention most tokens run undisturbed and a few wait a whole scheduling slice, and
//! those few are the cost. A probe token faster than the best's mean is followed by more with
//! the same count (up to [`WINDOW`]), and the governor switches once that count's mean, over at
//! least two tokens in a row, beats the best's. A probe that is not even faster than the best's
//! mean on its own makes the next one wait twice as long (up to [`MAX_PERIOD`] tokens), which bounds what
//! probing costs on a machine whose load does not change.
//!
//! The choice changes only the split of the work: ggml gives every output row to one thread, so
//! logits are bit-identical whatever the count (the engine's gate tests check it).

/// Tokens at the maximum before the first probe: on a busy device every token at the wrong
/// count can cost seconds, so the first comparison comes early.
pub const FIRST_PROBE: u64 = 2;
/// Tokens between probes right after a switch.
pub const MIN_PERIOD: u64 = 8;
/// The longest wait between probes, reached after losing probes.
pub const MAX_PERIOD: u64 = 128;
/// A count's mean must be this much below the best's to take over.
const WIN_MARGIN: f64 = 0.9;
/// Recent compute times kept per thread count (its mean is the count's estimate).
pub const WINDOW: usize = 8;

/// Picks the compute-thread count of each decoded token from the measured compute time of the
/// ones before.
#[derive(Debug, Clone)]
pub struct ThreadGovernor {
    /// The counts it chooses from: the maximum, then halvings down to 1.
    arms: Vec<usize>,
    /// The last [`WINDOW`] compute times (ms) seen with each arm, oldest first.
    recent: Vec<Vec<f64>>,
    /// Index of the arm it runs between probes.
    best: usize,
    /// Tokens between probes now.
    period: u64,
    /// Tokens decoded since the last probe ended.
    since_probe: u64,
    /// The challenger the next probes go to (round robin over the other arms).
    next_challenger: usize,
    /// What the token being decoded is.
    pending: Pending,
    /// Tokens run with each arm.
    used: Vec<u64>,
    /// Times the best arm changed.
    switches: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Pending {
    /// A token with the best arm.
    Best,
    /// Probe token number `len` (from 1) in a row with challenger `arm`.
    Probe { arm: usize, len: u32 },
}

impl ThreadGovernor {
    /// A governor choosing among `max_threads`, its halvings, and 1; it starts with the maximum.
    pub fn new(max_threads: usize) -> Self {
        let mut arms = vec![max_threads.max(1)];
        while let Some(&last) = arms.last()
            && last > 1
        {
            arms.push(last / 2);
        }
        let n = arms.len();
        Self {
            arms,
            recent: vec![Vec::new(); n],
            best: 0,
            period: MIN_PERIOD,
            since_probe: MIN_PERIOD - FIRST_PROBE,
            next_challenger: 1 % n,
            pending: Pending::Best,
            used: vec![0; n],
            switches: 0,
        }
    }

    /// The thread count for the next token; [`Self::record`] must follow with its compute time.
    pub fn next_threads(&mut self) -> usize {
        let arm = match self.pending {
            Pending::Probe { arm, .. } => arm,
            _ if self.arms.len() > 1 && self.since_probe >= self.period => {
                let arm = self.next_challenger;
                self.pending = Pending::Probe { arm, len: 1 };
                arm
            }
            _ => {
                self.pending = Pending::Best;
                self.best
            }
        };
        self.arms[arm]
    }

    /// Records the compute time (ms: wall minus flash I/O and cache management) of the token
    /// [`Self::next_threads`] chose the count of. A non-finite or negative time is ignored.
    pub fn record(&mut self, compute_ms: f64) {
        let arm = match self.pending {
            Pending::Best => self.best,
            Pending::Probe { arm, .. } => arm,
        };
        self.used[arm] += 1;
        if !compute_ms.is_finite() || compute_ms < 0.0 {
            // no evidence either way: a probe just ends, without slowing the next one down
            if self.pending == Pending::Best {
                self.since_probe += 1;
            } else {
                self.end_probe();
            }
            self.pending = Pending::Best;
            return;
        }
        let r = &mut self.recent[arm];
        if r.len() == WINDOW {
            r.remove(0);
        }
        r.push(compute_ms);
        let best = self.mean(self.best);
        let wins = matches!((self.mean(arm), best), (Some(a), Some(b)) if a < b * WIN_MARGIN);
        // this token alone was faster: its count's older samples may be from another load
        let promising = best.is_some_and(|b| compute_ms < b);
        self.pending = match self.pending {
            Pending::Best => {
                self.since_probe += 1;
                Pending::Best
            }
            Pending::Probe { arm, len } if wins && len > 1 => {
                // the challenger's mean won, and this probe has run it two tokens in a row or more
                self.best = arm;
                self.switches += 1;
                self.period = MIN_PERIOD;
                self.end_probe();
                Pending::Best
            }
            Pending::Probe { arm, len } if (wins || promising) && (len as usize) < WINDOW => {
                // faster than the best's mean: keep measuring it, so a window filled under
                // another load is replaced by tokens of this one
                Pending::Probe { arm, len: len + 1 }
            }
            Pending::Probe { .. } if promising => {
                self.period = MIN_PERIOD;
                self.end_probe();
                Pending::Best
            }
            Pending::Probe { .. } => {
                self.lost_probe();
                Pending::Best
            }
        };
    }

    fn lost_probe(&mut self) {
        // Back off only once every challenger has lost in this round, so each one is tried
        // at the current period before probing slows down.
        if self.round_complete() {
            self.period = (self.period * 2).min(MAX_PERIOD);
        }
        self.end_probe();
    }

    /// The challenger after the current one, skipping the best arm.
    fn following_challenger(&self) -> usize {
        let n = self.arms.len();
        let next = (self.next_challenger + 1) % n;
        if next == self.best {
            (next + 1) % n
        } else {
            next
        }
    }

    /// Whether the round robin wraps after the current challenger.
    fn round_complete(&self) -> bool {
        self.following_challenger() <= self.next_challenger
    }

    fn end_probe(&mut self) {
        self.since_probe = 0;
        self.next_challenger = self.following_challenger();
    }

    fn mean(&self, arm: usize) -> Option<f64> {
        let v = &self.recent[arm];
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    #[cfg(test)]
    /// The counts chosen from, largest first.
    pub fn arms(&self) -> &[usize] {
        &self.arms
    }

    #[cfg(test)]
    /// Tokens run with each count of [`Self::arms`].
    pub fn used(&self) -> &[u64] {
        &self.used
    }

    #[cfg(test)]
    /// How often the best count changed.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// The count it currently runs between probes.
    pub fn best_threads(&self) -> usize {
        self.arms[self.best]
    }

    /// One line for stderr: how the tokens were split.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .arms
            .iter()
            .zip(&self.used)
            .map(|(t, n)| format!("{n} token(s) at -t {t}"))
            .collect();
        format!(
            "adaptive threads: {}; {} switch(es), ending at -t {}",
            parts.join(", "),
            self.switches,
            self.best_threads()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `n` tokens whose compute time is `cost(threads, step)`; returns the counts chosen.
    fn drive(g: &mut ThreadGovernor, n: u64, cost: impl Fn(usize, u64) -> f64) -> Vec<usize> {
        (0..n)
            .map(|step| {
                let t = g.next_threads();
                g.record(cost(t, step));
                t
            })
            .collect()
    }

    #[test]
    fn arms_are_the_maximum_and_its_halvings() {
        assert_eq!(ThreadGovernor::new(8).arms(), &[8, 4, 2, 1]);
        assert_eq!(ThreadGovernor::new(6).arms(), &[6, 3, 1]);
        assert_eq!(ThreadGovernor::new(1).arms(), &[1]);
        assert_eq!(ThreadGovernor::new(0).arms(), &[1]);
    }

    #[test]
    fn one_thread_never_probes() {
        let mut g = ThreadGovernor::new(1);
        assert!(drive(&mut g, 100, |_, _| 5.0).iter().all(|&t| t == 1));
        assert_eq!(g.switches(), 0);
    }

    #[test]
    fn starts_at_the_maximum_and_stays_when_it_is_fastest() {
        let mut g = ThreadGovernor::new(2);
        let chosen = drive(&mut g, 400, |t, _| if t == 2 { 10.0 } else { 18.0 });
        assert_eq!(chosen[..FIRST_PROBE as usize], [2; FIRST_PROBE as usize]);
        assert_eq!(
            chosen[FIRST_PROBE as usize], 1,
            "the first probe comes early"
        );
        assert_eq!(g.best_threads(), 2);
        assert_eq!(g.switches(), 0);
        // losing probes back off: few tokens go to the slow count
        let slow = chosen.iter().filter(|&&t| t == 1).count();
        assert!(slow <= 8, "{slow} probes in 400 tokens");
        assert!(slow >= 3, "probing stopped ({slow})");
    }

    #[test]
    fn moves_to_fewer_threads_when_they_win_and_back_when_the_load_goes() {
        let mut g = ThreadGovernor::new(2);
        // busy machine: one thread is 4x faster than two
        let busy = |t: usize, _| if t == 2 { 40.0 } else { 10.0 };
        let chosen = drive(&mut g, 64, busy);
        assert_eq!(g.best_threads(), 1);
        assert_eq!(g.switches(), 1);
        // the switch happens after the first probe and its confirmation
        let first_one = chosen.iter().position(|&t| t == 1).expect("probed");
        assert_eq!(first_one, FIRST_PROBE as usize);
        assert!(chosen[first_one..].iter().filter(|&&t| t == 2).count() <= 3);
        // the load goes away: two threads are faster again, found by the next probe (at most
        // the backed-off period away) and the burst of tokens that refills its window
        let wait = g.period as usize;
        let idle = |t: usize, _| if t == 2 { 5.0 } else { 9.0 };
        let chosen = drive(&mut g, 200, idle);
        assert_eq!(g.best_threads(), 2);
        assert_eq!(g.switches(), 2);
        let back = chosen
            .windows(2)
            .position(|w| w == [2, 2])
            .expect("came back");
        assert!(
            back <= wait + WINDOW,
            "took {back} tokens to come back (period {wait})"
        );
        // after that only the backed-off probes run on one thread
        let probes = chosen[back..].iter().filter(|&&t| t == 1).count();
        assert!(probes <= 6, "{probes} one-thread tokens after coming back");
    }

    #[test]
    fn a_single_lucky_probe_does_not_switch() {
        let mut g = ThreadGovernor::new(2);
        // the one-thread count is slow, except for one token that happens to be fast
        let chosen = drive(&mut g, 64, |t, step| match (t, step) {
            (1, s) if s == FIRST_PROBE => 1.0,
            (1, _) => 30.0,
            _ => 10.0,
        });
        assert_eq!(chosen[FIRST_PROBE as usize], 1);
        assert_eq!(chosen[FIRST_PROBE as usize + 1], 1, "the win is confirmed");
        assert_eq!(g.best_threads(), 2);
        assert_eq!(g.switches(), 0);
    }

    #[test]
    fn rare_long_stalls_count_at_their_cost() {
        // two threads: most tokens fast, one in five waits a scheduling slice (mean 4.08);
        // one thread: always 1.0. The mean, not the typical token, decides.
        let mut g = ThreadGovernor::new(2);
        let chosen = drive(&mut g, 400, |t, step| match t {
            2 if step % 5 == 0 => 20.0,
            2 => 0.1,
            _ => 1.0,
        });
        assert_eq!(g.best_threads(), 1, "{:?}", g.used());
        let late_two = chosen[200..].iter().filter(|&&t| t == 2).count();
        assert!(late_two <= 40, "{late_two} of the last 200 tokens at -t 2");
    }

    #[test]
    fn tries_every_count_before_backing_off() {
        let mut g = ThreadGovernor::new(8);
        // 4 threads is the sweet spot
        let cost = |t: usize, _| match t {
            8 => 20.0,
            4 => 8.0,
            2 => 12.0,
            _ => 25.0,
        };
        drive(&mut g, 300, cost);
        assert_eq!(g.best_threads(), 4);
        assert!(g.used().iter().all(|&n| n > 0), "{:?}", g.used());
    }

    #[test]
    fn bad_samples_are_ignored_and_counts_add_up() {
        let mut g = ThreadGovernor::new(2);
        let chosen = drive(&mut g, 50, |t, step| {
            if step % 7 == 0 {
                f64::NAN
            } else if t == 2 {
                10.0
            } else {
                -1.0
            }
        });
        assert_eq!(g.used().iter().sum::<u64>(), 50);
        assert_eq!(chosen.len(), 50);
        assert_eq!(g.best_threads(), 2);
        assert!(
            g.summary().starts_with("adaptive threads: "),
            "{}",
            g.summary()
        );
    }
}
