//! Machine-readable output (`--format json|csv`) of the table-shaped reports.
//!
//! A report is a `meta` object (the header figures) and named tables. JSON is one object,
//! `{"meta": {...}, "<table>": [{column: value, ...}, ...]}`, with unrounded numbers; CSV is each
//! table as a header line plus rows, preceded by a `# table=<name>` line (the `#` preamble
//! convention of the trace files) and separated by a blank line.

use serde_json::{Map, Value};

/// One table: column names and rows of values in column order.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Key of the table in JSON, `# table=` line in CSV.
    pub name: &'static str,
    /// Column names.
    pub columns: Vec<&'static str>,
    /// Rows, each as long as `columns`.
    pub rows: Vec<Vec<Value>>,
}

impl Table {
    /// An empty table with these columns.
    #[must_use]
    pub fn new(name: &'static str, columns: &[&'static str]) -> Self {
        Self {
            name,
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Append a row (one value per column).
    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    fn json(&self) -> Value {
        Value::Array(
            self.rows
                .iter()
                .map(|r| {
                    let obj: Map<String, Value> = self
                        .columns
                        .iter()
                        .zip(r)
                        .map(|(c, v)| ((*c).to_string(), v.clone()))
                        .collect();
                    Value::Object(obj)
                })
                .collect(),
        )
    }

    fn csv(&self, out: &mut String) {
        out.push_str(&format!("# table={}\n", self.name));
        out.push_str(&self.plain_csv());
    }

    /// The table alone as a plain CSV: one header line and the rows, no `#` line, which is
    /// what pandas, DuckDB or a spreadsheet load without options (`--table`, `--out-dir`).
    #[must_use]
    pub fn plain_csv(&self) -> String {
        let mut out = self.columns.join(",");
        out.push('\n');
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(csv_cell).collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
        out
    }
}

fn csv_cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) if s.contains([',', '"', '\n']) => {
            format!("\"{}\"", s.replace('"', "\"\""))
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `--format json`: `meta` plus every table under its name, pretty-printed, newline-terminated.
#[must_use]
pub fn to_json(meta: Value, tables: &[Table]) -> String {
    let mut obj = Map::new();
    obj.insert("meta".into(), meta);
    for t in tables {
        obj.insert(t.name.into(), t.json());
    }
    format!("{:#}\n", Value::Object(obj))
}

/// `--format csv`: every table with its `# table=` line, blank line between tables.
#[must_use]
pub fn to_csv(tables: &[Table]) -> String {
    let mut out = String::new();
    for (i, t) in tables.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        t.csv(&mut out);
    }
    out
}

/// A JSON number for a finite float, `null` otherwise (JSON has no NaN or infinity).
#[must_use]
pub fn num(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_quotes_and_json_keeps_tables() {
        let mut t = Table::new("ops", &["op", "ms"]);
        t.push(vec![json!("MUL_MAT"), num(1.5)]);
        t.push(vec![json!("a,\"b\""), num(f64::NAN)]);
        assert_eq!(
            to_csv(&[t.clone()]),
            "# table=ops\nop,ms\nMUL_MAT,1.5\n\"a,\"\"b\"\"\",\n"
        );
        assert_eq!(t.plain_csv(), "op,ms\nMUL_MAT,1.5\n\"a,\"\"b\"\"\",\n");
        let v: Value = serde_json::from_str(&to_json(json!({"n": 1}), &[t])).unwrap();
        assert_eq!(v["ops"][0]["op"], "MUL_MAT");
        assert_eq!(v["ops"][1]["ms"], Value::Null);
        assert_eq!(v["meta"]["n"], 1);
    }
}
