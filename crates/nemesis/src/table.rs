//! A table of results: written whole as CSV, and in part as Markdown for the report.

/// The median of a non-empty sample (mean of the middle two for even sizes); 0 when empty. Here
/// beside the tables because the nemesis's recovery table needs it as much as the bench does.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// Named columns and rows of text cells (numbers are formatted by whoever pushes them, so the
/// CSV holds exactly what the report shows).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &[&str]) -> Table {
        Table { columns: columns.iter().map(|c| c.to_string()).collect(), rows: Vec::new() }
    }

    /// Adds a row; it must have one cell per column.
    pub fn push(&mut self, row: Vec<String>) -> anyhow::Result<()> {
        anyhow::ensure!(
            row.len() == self.columns.len(),
            "row has {} cells for {} columns ({:?})",
            row.len(),
            self.columns.len(),
            self.columns
        );
        self.rows.push(row);
        Ok(())
    }

    /// A table of typed rows: each row is serialized (serde) and its fields written under
    /// `columns`, in that order (numbers through [`num`], `None` as an empty cell). A column
    /// that is not a field of the rows is an error, so CSV, plots and report text all come
    /// from the same typed values.
    pub fn of<T: serde::Serialize>(columns: &[&str], rows: &[T]) -> anyhow::Result<Table> {
        let mut table = Table::new(columns);
        for row in rows {
            let value = serde_json::to_value(row)?;
            let object = value.as_object().ok_or_else(|| anyhow::anyhow!("a row is not a struct"))?;
            let cells = columns
                .iter()
                .map(|c| match object.get(*c) {
                    None => Err(anyhow::anyhow!("the rows have no field {c:?}")),
                    Some(serde_json::Value::Null) => Ok(String::new()),
                    Some(serde_json::Value::Number(n)) => Ok(n.as_f64().map(num).unwrap_or_default()),
                    Some(serde_json::Value::String(s)) => Ok(s.clone()),
                    Some(other) => Ok(other.to_string()),
                })
                .collect::<anyhow::Result<Vec<String>>>()?;
            table.push(cells)?;
        }
        Ok(table)
    }

    /// A table of typed rows under every field of `T`, in declaration order ([`fields`]).
    pub fn typed<T: serde::Serialize + Default>(rows: &[T]) -> anyhow::Result<Table> {
        let columns = fields::<T>()?;
        Table::of(&columns.iter().map(String::as_str).collect::<Vec<_>>(), rows)
    }

    /// The rows pushed so far.
    pub fn rows(&self) -> &[Vec<String>] {
        &self.rows
    }

    /// The cell of `row` under `column`, if both exist.
    pub fn cell<'a>(&'a self, row: &'a [String], column: &str) -> Option<&'a str> {
        self.columns.iter().position(|c| c == column).and_then(|i| row.get(i)).map(String::as_str)
    }

    /// RFC 4180 CSV: a header line, then one line per row; cells with commas, quotes or line
    /// breaks are quoted, quotes doubled.
    pub fn to_csv(&self) -> String {
        let mut out = String::new();
        for line in std::iter::once(&self.columns).chain(&self.rows) {
            let cells: Vec<String> = line.iter().map(|c| csv_cell(c)).collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
        out
    }

    /// A Markdown table of the named columns (in that order), optionally only the rows `keep`
    /// accepts. Unknown columns are an error, so a renamed column cannot silently vanish.
    pub fn to_markdown(&self, columns: &[&str], keep: impl Fn(&Table, &[String]) -> bool) -> anyhow::Result<String> {
        let index: Vec<usize> = columns
            .iter()
            .map(|name| {
                self.columns.iter().position(|c| c == name).ok_or_else(|| anyhow::anyhow!("no column {name:?}"))
            })
            .collect::<anyhow::Result<_>>()?;
        let mut out = String::new();
        md_head(&mut out, columns);
        for row in self.rows.iter().filter(|r| keep(self, r)) {
            md_row(&mut out, index.iter().map(|&i| row[i].replace('|', "\\|")));
        }
        Ok(out)
    }
}

/// Starts a Markdown table in a report: the column names and the rule under them. Every
/// section's tables are written by this and [`md_row`], so they are alike and none is
/// misaligned by a missing rule cell.
pub fn md_head(out: &mut String, columns: &[&str]) {
    md_row(out, columns);
    out.push('|');
    out.push_str(&"---|".repeat(columns.len()));
    out.push('\n');
}

/// One row of a Markdown table (an empty cell as `| |`), cells already formatted: numbers are
/// the caller's to show, as in the CSV.
pub fn md_row<S: AsRef<str>>(out: &mut String, cells: impl IntoIterator<Item = S>) {
    out.push('|');
    for cell in cells {
        match cell.as_ref() {
            "" => out.push_str(" |"),
            text => {
                out.push(' ');
                out.push_str(text);
                out.push_str(" |");
            }
        }
    }
    out.push('\n');
}

fn csv_cell(cell: &str) -> String {
    if cell.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell.to_string()
    }
}

/// Formats a number for a table: integers without decimals, large values with no fraction,
/// small ones with up to three significant decimals; NaN as empty, infinity as `inf`.
pub fn num(value: f64) -> String {
    if value.is_nan() {
        String::new()
    } else if value.is_infinite() {
        "inf".to_string()
    } else if value.fract() == 0.0 || value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

/// The fields of `T` in declaration order, as it serializes them (`flatten`ed fields in place,
/// `skip`ped ones left out): read back from a default row's JSON, which keeps that order. The
/// struct is then the one list of a CSV's columns, so a field cannot be left out of it.
pub fn fields<T: serde::Serialize + Default>() -> anyhow::Result<Vec<String>> {
    struct Keys;
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a struct")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some((key, serde::de::IgnoredAny)) = map.next_entry()? {
                keys.push(key);
            }
            Ok(keys)
        }
    }
    let json = serde_json::to_string(&T::default())?;
    Ok(serde::Deserializer::deserialize_map(&mut serde_json::Deserializer::from_str(&json), Keys)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_cells_that_need_it() {
        let mut t = Table::new(&["system", "note"]);
        t.push(vec!["tidings".into(), "plain".into()]).unwrap();
        t.push(vec!["nats".into(), "a, \"b\"".into()]).unwrap();
        assert_eq!(t.to_csv(), "system,note\ntidings,plain\nnats,\"a, \"\"b\"\"\"\n");
    }

    #[test]
    fn a_row_of_the_wrong_width_is_refused() {
        let mut t = Table::new(&["a", "b"]);
        assert!(t.push(vec!["1".into()]).is_err());
        assert!(t.rows().is_empty());
    }

    #[test]
    fn markdown_picks_columns_and_rows() {
        let mut t = Table::new(&["system", "n", "mean"]);
        t.push(vec!["tidings".into(), "10".into(), "1|2".into()]).unwrap();
        t.push(vec!["nats".into(), "10".into(), "3".into()]).unwrap();
        let md = t.to_markdown(&["mean", "system"], |t, r| t.cell(r, "system") == Some("tidings")).unwrap();
        assert_eq!(md, "| mean | system |\n|---|---|\n| 1\\|2 | tidings |\n");
        assert!(t.to_markdown(&["nope"], |_, _| true).is_err());
    }

    #[test]
    fn report_rows_keep_an_empty_cell_narrow() {
        let mut out = String::new();
        md_head(&mut out, &["", "one", "two"]);
        md_row(&mut out, ["a", "", "3 ms"]);
        assert_eq!(out, "| | one | two |\n|---|---|---|\n| a | | 3 ms |\n");
    }

    #[test]
    fn typed_rows_are_written_under_their_columns() {
        #[derive(serde::Serialize)]
        struct Row {
            system: String,
            mean: Option<f64>,
            n: usize,
        }
        let rows = [
            Row { system: "tidings".into(), mean: Some(12.34), n: 3 },
            Row { system: "nats".into(), mean: None, n: 4 },
        ];
        let t = Table::of(&["n", "system", "mean"], &rows).unwrap();
        assert_eq!(t.to_csv(), "n,system,mean\n3,tidings,12.3\n4,nats,\n");
        assert!(Table::of(&["nope"], &rows).is_err());
    }

    #[test]
    fn a_typed_table_takes_every_field_in_declaration_order() {
        #[derive(serde::Serialize, Default)]
        struct Inner {
            b: u32,
            a: Option<f64>,
        }
        #[derive(serde::Serialize, Default)]
        struct Row {
            z: String,
            #[serde(flatten)]
            inner: Inner,
            #[serde(skip)]
            _hidden: u8,
            y: bool,
        }
        assert_eq!(fields::<Row>().unwrap(), ["z", "b", "a", "y"]);
        let row = Row { z: "x".into(), inner: Inner { b: 2, a: None }, _hidden: 0, y: true };
        assert_eq!(Table::typed(&[row]).unwrap().to_csv(), "z,b,a,y\nx,2,,true\n");
    }

    #[test]
    fn numbers_are_formatted_by_magnitude() {
        assert_eq!(num(12345.678), "12346");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(0.12345), "0.123");
        assert_eq!(num(3.0), "3");
        assert_eq!(num(f64::NAN), "");
        assert_eq!(num(f64::INFINITY), "inf");
    }
}
