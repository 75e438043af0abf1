//! SUMMARY, changes to the subscription summary a link carries. Layout:
//! `count:u32 | count × delta`, `delta = scopes:u32 | scopes × scope | added:u32 | added × filter | removed:u32 | removed × filter`,
//! `scope = 0:u8 (local) | 1:u8 root:str16 (tree)`, `filter = pattern:str16 | selector:str16` (empty selector = none)
//! `[| group:str16]`.
//!
//! A delta whose `scopes` count has its [`GROUPED`] bit set carries a queue group after each
//! filter (empty: a plain filter). A group's interest is one entry per (group, filter) however
//! many members stand behind it. The bit versions the field: a broker that predates queue groups
//! reads an impossible scope count and refuses the frame, rather than misreading a group
//! filter as a plain one (which would send every member's broker a copy).

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_count, put_str16, Reader};
use crate::error::WireError;

/// Which part of a link's summary a delta changes (see `route::Scope`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// The sender's own local subscribers (scope byte 0).
    Local,
    /// Interest reachable through the sender in the tree rooted at this cell (scope byte 1).
    Tree(String),
}

/// A subscription filter as text: the receiver parses it again, so a filter that does not
/// parse is refused where it arrives, not trusted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FilterText {
    /// The topic pattern.
    pub pattern: String,
    /// The selector's canonical text, if any.
    pub selector: Option<String>,
    /// The queue group whose members stand behind this filter, if any.
    pub group: Option<String>,
}

/// The bit of a delta's scope count saying its filters carry a queue group each.
pub(crate) const GROUPED: u32 = 0x8000_0000;

/// The same filters added to and removed from each listed scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryDelta {
    /// The scopes the change applies to.
    pub scopes: Vec<Scope>,
    /// Filters now in each scope's summary.
    pub added: Vec<FilterText>,
    /// Filters no longer in each scope's summary.
    pub removed: Vec<FilterText>,
}

pub(crate) fn encode_body(deltas: &[SummaryDelta], out: &mut BytesMut) -> Result<(), WireError> {
    put_count(out, "deltas", deltas.len())?;
    for delta in deltas {
        let grouped = delta.added.iter().chain(&delta.removed).any(|filter| filter.group.is_some());
        let scopes = u32::try_from(delta.scopes.len())
            .ok()
            .filter(|count| count & GROUPED == 0)
            .ok_or(WireError::TooLong { field: "scopes", len: delta.scopes.len(), max: (GROUPED - 1) as usize })?;
        out.put_u32(if grouped { scopes | GROUPED } else { scopes });
        for scope in &delta.scopes {
            match scope {
                Scope::Local => out.put_u8(0),
                Scope::Tree(root) => {
                    out.put_u8(1);
                    put_str16(out, "root", root)?;
                }
            }
        }
        put_filters(out, "added", &delta.added, grouped)?;
        put_filters(out, "removed", &delta.removed, grouped)?;
    }
    Ok(())
}

fn put_filters(
    out: &mut BytesMut,
    field: &'static str,
    filters: &[FilterText],
    grouped: bool,
) -> Result<(), WireError> {
    put_count(out, field, filters.len())?;
    for filter in filters {
        put_str16(out, "pattern", &filter.pattern)?;
        put_str16(out, "selector", filter.selector.as_deref().unwrap_or(""))?;
        if grouped {
            put_str16(out, "group", filter.group.as_deref().unwrap_or(""))?;
        }
    }
    Ok(())
}

pub(crate) fn decode_body(body: &[u8]) -> Result<Vec<SummaryDelta>, WireError> {
    let mut r = Reader::new("SUMMARY", body);
    let count = r.count("deltas", 12)?;
    let mut deltas = Vec::with_capacity(count);
    for _ in 0..count {
        let offset = r.position();
        let flagged = r.u32("scopes")?;
        let grouped = flagged & GROUPED != 0;
        let scope_count = (flagged & !GROUPED) as usize;
        if scope_count > r.remaining() {
            let have = r.remaining();
            return Err(WireError::UnexpectedEof {
                frame: "SUMMARY",
                field: "scopes",
                offset,
                need: scope_count,
                have,
            });
        }
        let mut scopes = Vec::with_capacity(scope_count);
        for _ in 0..scope_count {
            scopes.push(match r.u8("scope")? {
                0 => Scope::Local,
                1 => Scope::Tree(r.str16("root")?.to_string()),
                v => return Err(WireError::InvalidField { frame: "SUMMARY", field: "scope", value: u64::from(v) }),
            });
        }
        let added = read_filters(&mut r, "added", grouped)?;
        let removed = read_filters(&mut r, "removed", grouped)?;
        deltas.push(SummaryDelta { scopes, added, removed });
    }
    r.finish()?;
    Ok(deltas)
}

fn read_filters(r: &mut Reader<'_>, field: &'static str, grouped: bool) -> Result<Vec<FilterText>, WireError> {
    let count = r.count(field, if grouped { 6 } else { 4 })?;
    let mut filters = Vec::with_capacity(count);
    for _ in 0..count {
        let pattern = r.str16("pattern")?.to_string();
        let selector = r.str16("selector")?;
        let selector = (!selector.is_empty()).then(|| selector.to_string());
        let group = match grouped {
            true => Some(r.str16("group")?).filter(|group| !group.is_empty()).map(str::to_string),
            false => None,
        };
        filters.push(FilterText { pattern, selector, group });
    }
    Ok(filters)
}
