//! Numbers as the report and the plots' ticks show them: short units, thousands separators,
//! parameter lists; and Markdown tables drawn from typed rows. Shared by the frame (the
//! figures' ticks) and every experiment's text.

use super::table::{md_head, md_row};

/// One column of a Markdown table of rows `R`: its heading and how a row shows in it.
pub type Column<'a, R> = (&'a str, &'a dyn Fn(&R) -> String);

/// A Markdown table with a line per row of `rows`: each column's heading and cell declared
/// side by side, so that they cannot drift apart.
pub fn md_table<R>(out: &mut String, rows: impl IntoIterator<Item = R>, columns: &[Column<'_, R>]) {
    md_head(out, &columns.iter().map(|(head, _)| *head).collect::<Vec<_>>());
    for row in rows {
        md_row(out, columns.iter().map(|(_, cell)| cell(&row)));
    }
}

/// A list for the parameter table: `10, 50, 100`.
pub fn list<T: std::fmt::Display>(items: &[T]) -> String {
    items.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

/// A quantity in µs as text with a unit that keeps it short: `850 µs`, `12.3 ms`, `1.37 s`.
pub fn micros(us: f64) -> String {
    if !us.is_finite() {
        "n/a".into()
    } else if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e4 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}

/// A rate with thousands separators: `123,456`.
pub fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".into();
    }
    let digits = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if value < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_has_a_heading_and_a_line_per_row() {
        let mut out = String::new();
        md_table(&mut out, [1, 20], &[("n", &|n| n.to_string()), ("twice", &|n| (2 * n).to_string())]);
        assert_eq!(out, "| n | twice |\n|---|---|\n| 1 | 2 |\n| 20 | 40 |\n");
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(micros(850.0), "850 µs");
        assert_eq!(micros(12_345.0), "12.3 ms");
        assert_eq!(micros(1_369_857.0), "1.37 s");
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(list(&[1, 2]), "1, 2");
    }
}
