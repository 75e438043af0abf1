//! What an experiment declares into, in one import: the [`Experiment`] trait and its
//! [`Context`] and [`Outcome`], the figure, CSV and Markdown builders, and the number formats
//! of the report. `use crate::suite::prelude::*;` at the top of an experiment's files.

pub use std::fmt::Write as _;

pub use super::figure::{self, Axis, Figure, Mark, Panel, Series};
pub use super::table::{md_head, md_row, num, Table};
pub use super::text::{list, md_table, micros, thousands};
pub use super::{About, Check, Context, Experiment, Outcome, Scale};
