//! Row structs of the telemetry readers → Arrow columns, one builder per column.
//!
//! Types follow the row structs exactly (a `u32` field is a UInt32 column), so a value reads
//! back unchanged. Text is dictionary-encoded; the dictionary is kept across batches
//! (`finish_preserve_values`), so every batch's dictionary extends the previous one — what an
//! Arrow IPC file needs (it cannot replace a dictionary, only append to it).

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder,
    StringDictionaryBuilder, UInt8Builder, UInt32Builder, UInt64Builder,
};
use arrow_array::types::Int32Type;
use arrow_schema::{ArrowError, DataType, Field};
use bmoe_telemetry::cell::ColumnType;
use bmoe_telemetry::metrics::{TOKEN_COLUMN_TYPES, TOKEN_COLUMNS, TokenRow};
use bmoe_telemetry::trace::{
    COMPUTE_COLUMNS, ComputeRow, IO_COLUMNS, IoRow, ROUTE_COLUMNS, RouteRow,
};

/// Accumulates rows of one kind and hands them out as Arrow columns.
pub(crate) trait Batcher {
    /// The telemetry row type.
    type Row;
    /// The Arrow fields, in column order.
    fn fields(&self) -> Vec<Field>;
    /// Appends one row.
    ///
    /// # Errors
    /// Only for a dictionary column that runs out of keys (2^31 distinct strings).
    fn push(&mut self, row: &Self::Row) -> Result<(), ArrowError>;
    /// Rows buffered since the last [`Self::finish`].
    fn len(&self) -> usize;
    /// The buffered rows as columns (in [`Self::fields`] order); the builders start over.
    fn finish(&mut self) -> Vec<ArrayRef>;
}

fn dict_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

fn col(name: &str, ty: DataType) -> Field {
    Field::new(name, ty, false)
}

/// Route trace rows (`dropped` only when the header has it).
pub(crate) struct RouteBatcher {
    turn: UInt32Builder,
    phase: UInt8Builder,
    step: Int64Builder,
    layer: UInt32Builder,
    slot: UInt32Builder,
    expert: UInt32Builder,
    weight: Float64Builder,
    residency: UInt8Builder,
    expert_bytes: UInt64Builder,
    dropped: Option<BooleanBuilder>,
}

impl RouteBatcher {
    pub(crate) fn new(with_dropped: bool) -> Self {
        RouteBatcher {
            turn: UInt32Builder::new(),
            phase: UInt8Builder::new(),
            step: Int64Builder::new(),
            layer: UInt32Builder::new(),
            slot: UInt32Builder::new(),
            expert: UInt32Builder::new(),
            weight: Float64Builder::new(),
            residency: UInt8Builder::new(),
            expert_bytes: UInt64Builder::new(),
            dropped: with_dropped.then(BooleanBuilder::new),
        }
    }
}

impl Batcher for RouteBatcher {
    type Row = RouteRow;

    fn fields(&self) -> Vec<Field> {
        let c = ROUTE_COLUMNS;
        let mut f = vec![
            col(c[0], DataType::UInt32),
            col(c[1], DataType::UInt8),
            col(c[2], DataType::Int64),
            col(c[3], DataType::UInt32),
            col(c[4], DataType::UInt32),
            col(c[5], DataType::UInt32),
            col(c[6], DataType::Float64),
            col(c[7], DataType::UInt8),
            col(c[8], DataType::UInt64),
        ];
        if self.dropped.is_some() {
            // An empty `dropped` cell is a null.
            f.push(Field::new(c[9], DataType::Boolean, true));
        }
        f
    }

    fn push(&mut self, r: &RouteRow) -> Result<(), ArrowError> {
        self.turn.append_value(r.turn);
        self.phase.append_value(r.phase);
        self.step.append_value(r.step);
        self.layer.append_value(r.layer);
        self.slot.append_value(r.slot);
        self.expert.append_value(r.expert);
        self.weight.append_value(r.weight);
        self.residency.append_value(r.residency);
        self.expert_bytes.append_value(r.expert_bytes);
        if let Some(d) = &mut self.dropped {
            d.append_option(r.dropped);
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.turn.len()
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let mut out: Vec<ArrayRef> = vec![
            Arc::new(self.turn.finish()),
            Arc::new(self.phase.finish()),
            Arc::new(self.step.finish()),
            Arc::new(self.layer.finish()),
            Arc::new(self.slot.finish()),
            Arc::new(self.expert.finish()),
            Arc::new(self.weight.finish()),
            Arc::new(self.residency.finish()),
            Arc::new(self.expert_bytes.finish()),
        ];
        if let Some(d) = &mut self.dropped {
            out.push(Arc::new(d.finish()));
        }
        out
    }
}

/// Compute trace rows.
pub(crate) struct ComputeBatcher {
    turn: UInt32Builder,
    phase: UInt8Builder,
    step: Int64Builder,
    seq: UInt32Builder,
    layer: Int32Builder,
    op: StringDictionaryBuilder<Int32Type>,
    name: StringDictionaryBuilder<Int32Type>,
    wall_ns: UInt64Builder,
    majflt: UInt64Builder,
}

impl ComputeBatcher {
    pub(crate) fn new() -> Self {
        ComputeBatcher {
            turn: UInt32Builder::new(),
            phase: UInt8Builder::new(),
            step: Int64Builder::new(),
            seq: UInt32Builder::new(),
            layer: Int32Builder::new(),
            op: StringDictionaryBuilder::new(),
            name: StringDictionaryBuilder::new(),
            wall_ns: UInt64Builder::new(),
            majflt: UInt64Builder::new(),
        }
    }
}

impl Batcher for ComputeBatcher {
    type Row = ComputeRow;

    fn fields(&self) -> Vec<Field> {
        let c = COMPUTE_COLUMNS;
        vec![
            col(c[0], DataType::UInt32),
            col(c[1], DataType::UInt8),
            col(c[2], DataType::Int64),
            col(c[3], DataType::UInt32),
            col(c[4], DataType::Int32),
            col(c[5], dict_type()),
            col(c[6], dict_type()),
            col(c[7], DataType::UInt64),
            col(c[8], DataType::UInt64),
        ]
    }

    fn push(&mut self, r: &ComputeRow) -> Result<(), ArrowError> {
        self.turn.append_value(r.turn);
        self.phase.append_value(r.phase);
        self.step.append_value(r.step);
        self.seq.append_value(r.seq);
        self.layer.append_value(r.layer);
        self.op.append(&r.op)?;
        self.name.append(&r.name)?;
        self.wall_ns.append_value(r.wall_ns);
        self.majflt.append_value(r.majflt);
        Ok(())
    }

    fn len(&self) -> usize {
        self.turn.len()
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        vec![
            Arc::new(self.turn.finish()),
            Arc::new(self.phase.finish()),
            Arc::new(self.step.finish()),
            Arc::new(self.seq.finish()),
            Arc::new(self.layer.finish()),
            Arc::new(self.op.finish_preserve_values()),
            Arc::new(self.name.finish_preserve_values()),
            Arc::new(self.wall_ns.finish()),
            Arc::new(self.majflt.finish()),
        ]
    }
}

/// Io trace rows.
pub(crate) struct IoBatcher {
    turn: UInt32Builder,
    phase: UInt8Builder,
    step: Int64Builder,
    layer: UInt32Builder,
    expert: UInt32Builder,
    proj: UInt8Builder,
    lane: UInt32Builder,
    spec: BooleanBuilder,
    offset: UInt64Builder,
    req_bytes: UInt64Builder,
    read_bytes: UInt64Builder,
    latency_ns: UInt64Builder,
}

impl IoBatcher {
    pub(crate) fn new() -> Self {
        IoBatcher {
            turn: UInt32Builder::new(),
            phase: UInt8Builder::new(),
            step: Int64Builder::new(),
            layer: UInt32Builder::new(),
            expert: UInt32Builder::new(),
            proj: UInt8Builder::new(),
            lane: UInt32Builder::new(),
            spec: BooleanBuilder::new(),
            offset: UInt64Builder::new(),
            req_bytes: UInt64Builder::new(),
            read_bytes: UInt64Builder::new(),
            latency_ns: UInt64Builder::new(),
        }
    }
}

impl Batcher for IoBatcher {
    type Row = IoRow;

    fn fields(&self) -> Vec<Field> {
        let c = IO_COLUMNS;
        vec![
            col(c[0], DataType::UInt32),
            col(c[1], DataType::UInt8),
            col(c[2], DataType::Int64),
            col(c[3], DataType::UInt32),
            col(c[4], DataType::UInt32),
            col(c[5], DataType::UInt8),
            col(c[6], DataType::UInt32),
            col(c[7], DataType::Boolean),
            col(c[8], DataType::UInt64),
            col(c[9], DataType::UInt64),
            col(c[10], DataType::UInt64),
            col(c[11], DataType::UInt64),
        ]
    }

    fn push(&mut self, r: &IoRow) -> Result<(), ArrowError> {
        self.turn.append_value(r.turn);
        self.phase.append_value(r.phase);
        self.step.append_value(r.step);
        self.layer.append_value(r.layer);
        self.expert.append_value(r.expert);
        self.proj.append_value(r.proj);
        self.lane.append_value(r.lane);
        self.spec.append_value(r.spec);
        self.offset.append_value(r.offset);
        self.req_bytes.append_value(r.req_bytes);
        self.read_bytes.append_value(r.read_bytes);
        self.latency_ns.append_value(r.latency_ns);
        Ok(())
    }

    fn len(&self) -> usize {
        self.turn.len()
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        vec![
            Arc::new(self.turn.finish()),
            Arc::new(self.phase.finish()),
            Arc::new(self.step.finish()),
            Arc::new(self.layer.finish()),
            Arc::new(self.expert.finish()),
            Arc::new(self.proj.finish()),
            Arc::new(self.lane.finish()),
            Arc::new(self.spec.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.req_bytes.finish()),
            Arc::new(self.read_bytes.finish()),
            Arc::new(self.latency_ns.finish()),
        ]
    }
}

/// The integer columns of [`TokenRow`], read without a detour through `f64`.
pub(crate) fn token_u64(row: &TokenRow, name: &str) -> Option<Option<u64>> {
    Some(match name {
        "step" => row.step,
        "steps" => row.steps,
        "read_bytes" => row.read_bytes,
        "majflt" => row.majflt,
        "turn" => row.turn,
        "mtp_batch" => row.mtp_batch,
        _ => return None,
    })
}

enum MetricsColumn {
    UInt(&'static str, UInt64Builder),
    Float(&'static str, Float64Builder),
}

/// Metrics rows: the known columns the header has, in header order, all nullable.
pub(crate) struct MetricsBatcher {
    columns: Vec<MetricsColumn>,
    skipped: Vec<String>,
    rows: usize,
}

impl MetricsBatcher {
    /// Columns from the file's header; names the telemetry reader does not know are skipped
    /// (and listed by [`Self::skipped`]).
    pub(crate) fn new(header: &[String]) -> Self {
        let mut columns = Vec::new();
        let mut skipped = Vec::new();
        for name in header {
            let known = TOKEN_COLUMNS.iter().position(|c| c == name);
            let Some(i) = known else {
                skipped.push(name.clone());
                continue;
            };
            // A repeated header name reads as the first occurrence; write it once.
            if columns.iter().any(|c| column_name(c) == TOKEN_COLUMNS[i]) {
                continue;
            }
            let name = TOKEN_COLUMNS[i];
            let integer = TOKEN_COLUMN_TYPES[i] == ColumnType::UInt
                && token_u64(&TokenRow::default(), name).is_some();
            columns.push(if integer {
                MetricsColumn::UInt(name, UInt64Builder::new())
            } else {
                MetricsColumn::Float(name, Float64Builder::new())
            });
        }
        MetricsBatcher {
            columns,
            skipped,
            rows: 0,
        }
    }

    /// Header columns left out.
    pub(crate) fn skipped(&self) -> &[String] {
        &self.skipped
    }
}

fn column_name(c: &MetricsColumn) -> &'static str {
    match c {
        MetricsColumn::UInt(n, _) | MetricsColumn::Float(n, _) => n,
    }
}

impl Batcher for MetricsBatcher {
    type Row = TokenRow;

    fn fields(&self) -> Vec<Field> {
        self.columns
            .iter()
            .map(|c| match c {
                MetricsColumn::UInt(n, _) => Field::new(*n, DataType::UInt64, true),
                MetricsColumn::Float(n, _) => Field::new(*n, DataType::Float64, true),
            })
            .collect()
    }

    fn push(&mut self, row: &TokenRow) -> Result<(), ArrowError> {
        for c in &mut self.columns {
            match c {
                MetricsColumn::UInt(n, b) => b.append_option(token_u64(row, n).flatten()),
                MetricsColumn::Float(n, b) => b.append_option(row.get_f64(n)),
            }
        }
        self.rows += 1;
        Ok(())
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        self.columns
            .iter_mut()
            .map(|c| -> ArrayRef {
                match c {
                    MetricsColumn::UInt(_, b) => Arc::new(b.finish()),
                    MetricsColumn::Float(_, b) => Arc::new(b.finish()),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_integer_metrics_column_keeps_its_integer_type() {
        for (name, ty) in TOKEN_COLUMNS.iter().zip(TOKEN_COLUMN_TYPES) {
            let known = token_u64(&TokenRow::default(), name).is_some();
            assert_eq!(known, ty == ColumnType::UInt, "column {name}");
        }
    }

    #[test]
    fn unknown_and_repeated_metrics_columns_are_left_out_once() {
        let header: Vec<String> = ["step", "wall_ms", "gpu_ms", "step"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let b = MetricsBatcher::new(&header);
        let names: Vec<String> = b.fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["step", "wall_ms"]);
        assert_eq!(b.fields()[0].data_type(), &DataType::UInt64);
        assert_eq!(b.skipped(), ["gpu_ms"]);
    }
}
