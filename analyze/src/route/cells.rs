//! Grouping kept rows into cells: the rows sharing (step, layer).
//!
//! Turn is not part of the key (the reference merges turns unless `--turn` is given). Cells are
//! numbered in order of first appearance in the file; a cell's rows are stably sorted by slot.

use std::collections::HashMap;

use super::RouteRows;

/// Cells of a set of kept rows, stored as one index array sliced per cell.
#[derive(Debug, Clone)]
pub struct Cells {
    /// Step of each cell.
    pub step: Vec<i32>,
    /// Layer of each cell.
    pub layer: Vec<u16>,
    start: Vec<u32>,
    rows: Vec<u32>,
    /// Distinct layers with rows, ascending.
    pub layers: Vec<u16>,
    /// Distinct steps with rows, ascending.
    pub steps: Vec<i32>,
    /// Per layer (same order as `layers`): its cells ordered by step ascending ("positions").
    pub by_layer: Vec<Vec<u32>>,
}

impl Cells {
    /// Group `rows` into cells.
    #[must_use]
    pub fn build(rows: &RouteRows) -> Self {
        let n = rows.len();
        let mut id_of: HashMap<(i32, u16), u32> = HashMap::new();
        let mut cell_of_row: Vec<u32> = Vec::with_capacity(n);
        let mut step = Vec::new();
        let mut layer = Vec::new();
        let mut last: Option<((i32, u16), u32)> = None;
        for r in 0..n {
            let key = (rows.step[r], rows.layer[r]);
            let id = match last {
                Some((k, id)) if k == key => id,
                _ => {
                    let next = step.len() as u32;
                    let id = *id_of.entry(key).or_insert(next);
                    if id == next {
                        step.push(key.0);
                        layer.push(key.1);
                    }
                    id
                }
            };
            last = Some((key, id));
            cell_of_row.push(id);
        }
        let n_cells = step.len();
        // Counting sort of row indices by cell id keeps file order inside a cell (stable).
        let mut start = vec![0u32; n_cells + 1];
        for &c in &cell_of_row {
            start[c as usize + 1] += 1;
        }
        for c in 0..n_cells {
            start[c + 1] += start[c];
        }
        let mut fill = start.clone();
        let mut order = vec![0u32; n];
        for (r, &c) in cell_of_row.iter().enumerate() {
            order[fill[c as usize] as usize] = r as u32;
            fill[c as usize] += 1;
        }
        drop(cell_of_row);
        for c in 0..n_cells {
            let s = &mut order[start[c] as usize..start[c + 1] as usize];
            if s.windows(2)
                .any(|w| rows.slot[w[0] as usize] > rows.slot[w[1] as usize])
            {
                s.sort_by_key(|&r| rows.slot[r as usize]);
            }
        }
        let mut layers: Vec<u16> = layer.clone();
        layers.sort_unstable();
        layers.dedup();
        let mut steps: Vec<i32> = step.clone();
        steps.sort_unstable();
        steps.dedup();
        let mut by_layer: Vec<Vec<u32>> = vec![Vec::new(); layers.len()];
        for (c, l) in layer.iter().enumerate() {
            if let Ok(li) = layers.binary_search(l) {
                by_layer[li].push(c as u32);
            }
        }
        for list in &mut by_layer {
            if list
                .windows(2)
                .any(|w| step[w[0] as usize] > step[w[1] as usize])
            {
                list.sort_by_key(|&c| step[c as usize]);
            }
        }
        Self {
            step,
            layer,
            start,
            rows: order,
            layers,
            steps,
            by_layer,
        }
    }

    /// Number of cells.
    #[must_use]
    pub fn len(&self) -> usize {
        self.step.len()
    }

    /// True when there are no cells.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.step.is_empty()
    }

    /// Row indices of cell `c`, in slot order.
    #[must_use]
    pub fn rows(&self, c: u32) -> &[u32] {
        let c = c as usize;
        &self.rows[self.start[c] as usize..self.start[c + 1] as usize]
    }

    /// Expert ids of cell `c` ordered by (slot, expert) — the order seq_by_layer uses.
    #[must_use]
    pub fn ids_by_slot_expert(&self, c: u32, rows: &RouteRows) -> Vec<u32> {
        let mut v: Vec<(u16, u32)> = self
            .rows(c)
            .iter()
            .map(|&r| (rows.slot[r as usize], rows.expert[r as usize]))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, e)| e).collect()
    }
}
