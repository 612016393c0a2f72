//! `--predict-prefetch`'s stale-gate ranking off the eval thread (engine spec §2.11): layer
//! `il`'s MoE input is handed, with layer `il + 2`'s router, to one worker thread, and the
//! ranking is collected right after layer `il + 1`'s load — never waited for. A ranking that is
//! not back by then is dropped (counted as late): the prefetch is lossless, so a late guess costs
//! only the read ahead it would have made, while waiting for it would cost the eval thread.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

/// Env var (test): `1` prints the worker's counts on stderr when it stops
/// (`bmoe: test: stale-gate ranked=.. collected=.. late=..`).
pub const RANK_COUNTS_ENV: &str = "BMOE_TEST_RANK_COUNTS";

/// Env var (test): `1` makes the collection wait for its ranking, so a tiny model — whose layers
/// compute faster than a thread wakes — still reads ahead deterministically.
pub const RANK_WAIT_ENV: &str = "BMOE_TEST_RANK_WAIT";

/// One ranking to make.
struct Job {
    /// Which decode it belongs to (a ranking of an earlier decode is stale).
    epoch: u64,
    /// The layer whose router ranks.
    layer: usize,
    /// The router: `n_embd` values per expert.
    n_embd: usize,
    router: Arc<Vec<f32>>,
    /// The MoE input row.
    x: Vec<f32>,
}

/// A finished ranking: (epoch, layer, ids best first).
type Ranked = (u64, usize, Vec<i32>);

/// What the worker did, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RankCounts {
    /// Rankings submitted.
    pub ranked: u64,
    /// Rankings back in time for their read-ahead.
    pub collected: u64,
    /// Rankings not back when their read-ahead came (dropped).
    pub late: u64,
}

/// The worker thread and its two queues.
#[derive(Debug)]
pub struct RankWorker {
    jobs: Option<Sender<Job>>,
    done: Receiver<Ranked>,
    handle: Option<JoinHandle<()>>,
    /// Per layer, the epoch of the ranking waiting to be collected (`None`: none asked for).
    pending: Vec<Option<u64>>,
    /// Per layer, a ranking back in time.
    ready: Vec<Option<Vec<i32>>>,
    counts: RankCounts,
    /// [`RANK_WAIT_ENV`].
    wait: bool,
}

impl RankWorker {
    /// Starts the worker; rankings keep their `depth` best ids. `None` when the thread cannot
    /// be made (the prefetch then guesses nothing, which is lossless).
    pub fn start(depth: usize) -> Option<Self> {
        let (jobs, rx) = channel::<Job>();
        let (tx, done) = channel::<Ranked>();
        let handle = std::thread::Builder::new()
            .name("bmoe-rank".into())
            .spawn(move || {
                for j in rx {
                    let ids = rank(j.n_embd, &j.router, &j.x, depth);
                    if tx.send((j.epoch, j.layer, ids)).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Self {
            jobs: Some(jobs),
            done,
            handle: Some(handle),
            pending: Vec::new(),
            ready: Vec::new(),
            counts: RankCounts::default(),
            wait: std::env::var(RANK_WAIT_ENV).is_ok_and(|v| v == "1"),
        })
    }

    /// Hands over the ranking of `layer`'s router (`n_embd` per expert) on `x`, for decode
    /// `epoch`. Replaces a ranking of `layer` not collected yet.
    pub fn submit(
        &mut self,
        epoch: u64,
        layer: usize,
        n_embd: usize,
        router: Arc<Vec<f32>>,
        x: Vec<f32>,
    ) {
        let Some(jobs) = self.jobs.as_ref() else {
            return;
        };
        if n_embd == 0 || n_embd != x.len() {
            return;
        }
        let job = Job {
            epoch,
            layer,
            n_embd,
            router,
            x,
        };
        if jobs.send(job).is_ok() {
            self.counts.ranked += 1;
            grow(&mut self.pending, layer);
            grow(&mut self.ready, layer);
            self.pending[layer] = Some(epoch);
            self.ready[layer] = None;
        }
    }

    /// The ranking of `layer` for decode `epoch`, if it is back; whether or not, `layer` is no
    /// longer waited on (a ranking arriving later is dropped).
    pub fn collect(&mut self, epoch: u64, layer: usize) -> Option<Vec<i32>> {
        while let Ok(r) = self.done.try_recv() {
            self.keep(r);
        }
        while self.wait
            && self.pending.get(layer).copied().flatten() == Some(epoch)
            && self.ready[layer].is_none()
        {
            match self.done.recv() {
                Ok(r) => self.keep(r),
                Err(_) => break,
            }
        }
        let asked = self.pending.get_mut(layer)?.take()?;
        let got = self.ready[layer].take().filter(|_| asked == epoch);
        match got {
            Some(_) => self.counts.collected += 1,
            None => self.counts.late += 1,
        }
        got
    }

    /// Keeps a ranking that is still asked for.
    fn keep(&mut self, (e, l, ids): Ranked) {
        if self.pending.get(l).copied().flatten() == Some(e) {
            self.ready[l] = Some(ids);
        }
    }

    /// Test: blocks until the next ranking is back and keeps it as [`Self::collect`] would.
    #[cfg(test)]
    fn wait_one(&mut self) {
        let r = self
            .done
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the worker answers");
        self.keep(r);
    }

    /// What the worker did so far.
    pub fn counts(&self) -> RankCounts {
        self.counts
    }
}

impl Drop for RankWorker {
    fn drop(&mut self) {
        // closing the queue ends the worker's loop
        self.jobs = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        if std::env::var(RANK_COUNTS_ENV).is_ok_and(|v| v == "1") {
            let c = self.counts;
            eprintln!(
                "bmoe: test: stale-gate ranked={} collected={} late={}",
                c.ranked, c.collected, c.late
            );
        }
    }
}

fn grow<T: Default + Clone>(v: &mut Vec<T>, i: usize) {
    if v.len() <= i {
        v.resize(i + 1, T::default());
    }
}

/// `router` (`n_embd` values per expert) applied to `x`: the `depth` best ids, best first.
pub fn rank(n_embd: usize, router: &[f32], x: &[f32], depth: usize) -> Vec<i32> {
    let scores: Vec<f32> = router
        .chunks_exact(n_embd)
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect();
    top_ids(&scores, depth)
}

/// The `depth` best ids of `scores`, best first, ties to the lower id.
pub fn top_ids(scores: &[f32], depth: usize) -> Vec<i32> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    let cmp = |a: &usize, b: &usize| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b));
    let d = depth.min(idx.len());
    if d > 0 && d < idx.len() {
        idx.select_nth_unstable_by(d - 1, cmp);
        idx.truncate(d);
    }
    idx.sort_by(cmp);
    idx.into_iter().map(|i| i as i32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_ids_rank_best_first_with_ties_to_the_lower_id() {
        assert_eq!(top_ids(&[0.1, 0.9, 0.5, 0.9], 3), vec![1, 3, 2]);
        assert_eq!(top_ids(&[1.0, 2.0], 8), vec![1, 0]);
        assert_eq!(top_ids(&[], 2), Vec::<i32>::new());
    }

    #[test]
    fn rankings_come_back_for_their_epoch_and_a_stale_one_is_dropped() {
        let mut w = RankWorker::start(2).expect("worker");
        // 3 experts × 2 dims; x picks expert 2 then 0
        let router = Arc::new(vec![1.0, 0.0, 0.0, 0.0, 2.0, 0.0]);
        w.submit(1, 4, 2, Arc::clone(&router), vec![1.0, 0.0]);
        w.wait_one();
        assert_eq!(w.collect(1, 4), Some(vec![2, 0]));
        // collected once: a second collect finds nothing asked for
        assert_eq!(w.collect(1, 4), None);
        // a ranking of an older decode is not used
        w.submit(1, 3, 2, Arc::clone(&router), vec![0.0, 1.0]);
        w.wait_one();
        assert_eq!(w.collect(2, 3), None);
        let c = w.counts();
        assert_eq!((c.ranked, c.collected, c.late), (2, 1, 1));
        // a mismatched row is refused, not ranked
        w.submit(2, 1, 2, router, vec![1.0]);
        assert_eq!(w.counts().ranked, 2);
    }
}
