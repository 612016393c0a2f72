//! Run order of a sweep block: its cells' counted runs laid out by the order mode
//! (as written, interleaved, reverse passes, a seeded shuffle, an explicit sequence), with each
//! cell's warm-ups right before its first counted run.

use std::collections::BTreeSet;

use bmoe_stats::SplitMix64;

use super::{Cell, Ctx, PlannedRun, Res};
use crate::sweep::manifest::{OrderMode, SweepDef};

/// Appends the runs of sweep `sw`, whose cells are `cells[first..]`, to `runs`.
pub(super) fn order_runs(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    first: usize,
    cells: &[Cell],
    runs: &mut Vec<PlannedRun>,
) -> Res<()> {
    let settings = sw.settings().or(&cx.m.defaults);
    let reps = settings.repetitions.unwrap_or(1);
    let order = settings.order.clone().unwrap_or_default();
    let warm = settings.warmup.clone().unwrap_or_default().runs;
    let ids: Vec<usize> = (first..cells.len()).collect();
    let run = |cell: usize, pass: u32| PlannedRun {
        cell,
        rep: format!("r{pass}"),
        warmup: false,
        pass,
    };
    let mut counted: Vec<PlannedRun> = Vec::new();
    match order.mode {
        OrderMode::AsWritten => {
            for &c in &ids {
                for p in 1..=reps {
                    counted.push(run(c, p));
                }
            }
        }
        OrderMode::Interleaved => {
            for p in 1..=reps {
                counted.extend(ids.iter().map(|&c| run(c, p)));
            }
        }
        OrderMode::ReversePasses => {
            for p in 1..=reps {
                if p % 2 == 1 {
                    counted.extend(ids.iter().map(|&c| run(c, p)));
                } else {
                    counted.extend(ids.iter().rev().map(|&c| run(c, p)));
                }
            }
        }
        OrderMode::Shuffle => {
            for p in 1..=reps {
                counted.extend(ids.iter().map(|&c| run(c, p)));
            }
            let mut rng = SplitMix64::new(order.seed.unwrap_or(1));
            for i in (1..counted.len()).rev() {
                let j = rng.below(i + 1);
                counted.swap(i, j);
            }
        }
        OrderMode::Explicit => {
            let Some(seq) = &order.sequence else {
                return Err(cx.err_hint(
                    sw.name.span(),
                    "order mode `explicit` needs `sequence = [cell tags]`",
                    "write order = { mode = \"explicit\", sequence = [\"tag1\", \"tag2\"] }; `--check` lists the cells' tags",
                ));
            };
            let mut seq_ids = Vec::new();
            for t in seq.get_ref() {
                let matches: Vec<usize> = ids
                    .iter()
                    .copied()
                    .filter(|&c| &cells[c].tag == t)
                    .collect();
                if matches.is_empty() {
                    let tags: Vec<&str> = ids.iter().map(|&c| cells[c].tag.as_str()).collect();
                    return Err(cx.err_hint(
                        seq.span(),
                        format!("sequence names `{t}`, which is not a cell of this sweep"),
                        format!("cells: {}", tags.join(", ")),
                    ));
                }
                seq_ids.extend(matches);
            }
            for &c in &ids {
                if !seq_ids.contains(&c) {
                    return Err(cx.err(
                        seq.span(),
                        format!("sequence leaves out cell `{}`", cells[c].tag),
                    ));
                }
            }
            for p in 1..=reps {
                counted.extend(seq_ids.iter().map(|&c| run(c, p)));
            }
        }
    }
    // Warm-ups right before each cell's first counted run.
    let mut warmed = BTreeSet::new();
    for r in counted {
        if warm > 0 && warmed.insert(r.cell) {
            for w in 1..=warm {
                runs.push(PlannedRun {
                    cell: r.cell,
                    rep: format!("w{w}"),
                    warmup: true,
                    pass: 0,
                });
            }
        }
        runs.push(r);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{HEAD, plan};

    fn order_of(mode: &str, reps: u32) -> Vec<String> {
        let p = plan(&format!("{HEAD}[[sweep]]\nname = \"s\"\nmodels = [\"tiny\"]\ntag = \"{{cache}}\"\naxes = {{ cache = [1, 2, 3] }}\nrepetitions = {reps}\norder = {mode}\nwarmup = {{ runs = 1 }}\n")).expect("ok");
        p.runs
            .iter()
            .map(|r| format!("{}{}", p.cells[r.cell].tag, r.rep))
            .collect()
    }

    #[test]
    fn orders() {
        assert_eq!(
            order_of("{ mode = \"as-written\" }", 2),
            [
                "1w1", "1r1", "1r2", "2w1", "2r1", "2r2", "3w1", "3r1", "3r2"
            ]
        );
        assert_eq!(
            order_of("{ mode = \"interleaved\" }", 2),
            [
                "1w1", "1r1", "2w1", "2r1", "3w1", "3r1", "1r2", "2r2", "3r2"
            ]
        );
        assert_eq!(
            order_of("{ mode = \"reverse-passes\" }", 2),
            [
                "1w1", "1r1", "2w1", "2r1", "3w1", "3r1", "3r2", "2r2", "1r2"
            ]
        );
        assert_eq!(
            order_of(
                "{ mode = \"explicit\", sequence = [\"3\", \"1\", \"2\"] }",
                1
            ),
            ["3w1", "3r1", "1w1", "1r1", "2w1", "2r1"]
        );
        let a = order_of("{ mode = \"shuffle\", seed = 7 }", 3);
        let b = order_of("{ mode = \"shuffle\", seed = 7 }", 3);
        let c = order_of("{ mode = \"shuffle\", seed = 8 }", 3);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 12);
    }
}
