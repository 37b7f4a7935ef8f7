//! IP filters in perf's syntax: what `perf record --filter` takes, and what
//! perf records in AUXTRACE_INFO once it has resolved symbols to file
//! offsets (`filter 0x4f0/0x20@/usr/bin/app`), which decoders read back to
//! know the ranges the trace was written under.
//!
//! One filter is `ACTION START[/SIZE][@FILE]`, several are separated by
//! commas. `START` is an address (a file offset when a file is named, as
//! the kernel reads it) or a function's name. Intel PT has two actions: a
//! `filter` range traces only while the IP is inside it (FilterEn), a
//! `stop` range (`tracestop` is perf's other spelling) stops tracing where
//! it is entered (TraceStop). `start`, which other PMUs take, Intel PT has
//! not.

/// What is wrong with the text of a filter.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterSyntaxError {
    #[error("bad filter `{filter}`: {why}")]
    Syntax { filter: String, why: String },
    #[error("filter action `{0}` is not one Intel PT has: it has `filter` and `stop`")]
    Action(String),
    #[error("the filter `{0}` has a size of zero")]
    Empty(String),
}

/// What the hardware does in a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FilterAction {
    /// Trace only while the IP is in one of the `filter` ranges.
    Filter,
    /// Stop tracing when the IP enters the range.
    Stop,
}

/// Where a filter range starts, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterStart {
    /// An offset in the file, as the kernel and perf read it, or a
    /// runtime address when the filter names no file.
    Address(u64),
    Symbol(String),
}

/// One filter of a filter string, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterSpec {
    pub action: FilterAction,
    pub start: FilterStart,
    pub size: Option<u64>,
    pub file: Option<String>,
}

/// A filter range resolved in its file: `size` bytes from file offset
/// `offset` of `file`. Without a file, `offset` is a runtime address.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FilterRange {
    pub action: FilterAction,
    pub offset: u64,
    pub size: u64,
    pub file: Option<String>,
}

/// A mapping of a file into a process, as much of it as placing a filter
/// needs.
#[derive(Clone, Copy, Debug)]
pub struct MappedFile<'a> {
    pub start: u64,
    pub len: u64,
    /// The file offset mapped at `start`.
    pub offset: u64,
    pub path: &'a str,
}

/// An address or size as filters write them: decimal, or hex after `0x`.
pub fn parse_number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Parses a filter string: one or more filters separated by commas.
pub fn parse(text: &str) -> Result<Vec<FilterSpec>, FilterSyntaxError> {
    let mut out = Vec::new();
    for one in text.split(',').map(str::trim) {
        if one.is_empty() {
            continue;
        }
        out.push(parse_one(one)?);
    }
    if out.is_empty() {
        return Err(FilterSyntaxError::Syntax {
            filter: text.into(),
            why: "no filter given".into(),
        });
    }
    Ok(out)
}

fn parse_one(text: &str) -> Result<FilterSpec, FilterSyntaxError> {
    let syntax = |why: &str| FilterSyntaxError::Syntax {
        filter: text.into(),
        why: why.into(),
    };
    let (action, rest) = text
        .split_once(char::is_whitespace)
        .ok_or_else(|| syntax("expected `filter <start> [/ <size>] [@<file>]`"))?;
    let action = match action {
        "filter" => FilterAction::Filter,
        "stop" | "tracestop" => FilterAction::Stop,
        "start" => return Err(FilterSyntaxError::Action(action.into())),
        _ => return Err(syntax("it must begin with `filter` or `stop`")),
    };
    let (range, file) = match rest.split_once('@') {
        Some((_, f)) if f.trim().is_empty() => return Err(syntax("no file name after `@`")),
        Some((r, f)) => (r, Some(f.trim().to_string())),
        None => (rest, None),
    };
    let (start, size) = match range.split_once('/') {
        Some((s, size)) => (
            s.trim(),
            Some(parse_number(size).ok_or_else(|| syntax("the size is not a number"))?),
        ),
        None => (range.trim(), None),
    };
    if start.is_empty() {
        return Err(syntax("no start address or symbol"));
    }
    let start = match parse_number(start) {
        Some(a) => FilterStart::Address(a),
        None if start.starts_with(|c: char| c.is_ascii_digit()) => {
            return Err(syntax("the start is not a number"))
        }
        None if start.contains(char::is_whitespace) => {
            return Err(syntax("the start is not one symbol"))
        }
        None => FilterStart::Symbol(start.into()),
    };
    if start == FilterStart::Address(0) && size.is_none() || size == Some(0) {
        return Err(FilterSyntaxError::Empty(text.into()));
    }
    if matches!(start, FilterStart::Address(_)) && size.is_none() {
        return Err(syntax("an address range needs a size (`<start>/<size>`)"));
    }
    Ok(FilterSpec {
        action,
        start,
        size,
        file,
    })
}

/// Ranges as the kernel takes them and perf records them in
/// AUXTRACE_INFO: `filter 0x<offset>/0x<size>@<file>` (or `stop …`, as
/// perf writes a `tracestop` range), comma-separated.
pub fn kernel_string(ranges: &[FilterRange]) -> String {
    ranges
        .iter()
        .map(|r| {
            let action = match r.action {
                FilterAction::Filter => "filter",
                FilterAction::Stop => "stop",
            };
            match &r.file {
                Some(f) => format!("{action} {:#x}/{:#x}@{f}", r.offset, r.size),
                None => format!("{action} {:#x}/{:#x}", r.offset, r.size),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where `size` bytes from `offset` of `file` lie in a process mapped as
/// `maps`: [start, end) runtime address ranges, as the kernel places a file
/// filter in every mapping of its file that covers the offset. Without a
/// file the offset is the address. A range whose file is not mapped has no
/// addresses.
pub fn place<'a>(
    offset: u64,
    size: u64,
    file: Option<&str>,
    maps: impl IntoIterator<Item = MappedFile<'a>>,
) -> Vec<(u64, u64)> {
    let Some(file) = file else {
        return vec![(offset, offset.saturating_add(size))];
    };
    maps.into_iter()
        .filter(|m| m.path == file && offset >= m.offset && offset - m.offset < m.len)
        .map(|m| {
            let start = m.start.wrapping_add(offset - m.offset);
            (start, start.saturating_add(size))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_perf_syntax() {
        let f = parse("filter main @ /bin/true, filter 0x1000/0x20@/lib/x.so").unwrap();
        assert_eq!(
            f,
            [
                FilterSpec {
                    action: FilterAction::Filter,
                    start: FilterStart::Symbol("main".into()),
                    size: None,
                    file: Some("/bin/true".into())
                },
                FilterSpec {
                    action: FilterAction::Filter,
                    start: FilterStart::Address(0x1000),
                    size: Some(0x20),
                    file: Some("/lib/x.so".into())
                }
            ]
        );
        let stop = parse("filter foo/64, tracestop 0xffffffff81000000/0x100").unwrap();
        assert_eq!(stop[0].start, FilterStart::Symbol("foo".into()));
        assert_eq!((stop[0].size, stop[0].file.as_deref()), (Some(64), None));
        assert_eq!(stop[1].action, FilterAction::Stop);
        assert_eq!(parse("stop 0x10/1").unwrap()[0].action, FilterAction::Stop);
    }

    #[test]
    fn bad_syntax_is_named() {
        for (text, want) in [
            ("main", "expected"),
            ("filter", "expected"),
            ("filter 0x1000", "needs a size"),
            ("filter main/zz", "size is not a number"),
            ("filter main @", "no file name"),
            ("frob main", "must begin"),
            ("filter 12ab/4", "not a number"),
            ("filter a b/4", "not one symbol"),
            ("", "no filter"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        assert_eq!(
            parse("start main").unwrap_err(),
            FilterSyntaxError::Action("start".into())
        );
        assert!(matches!(
            parse("filter 0x10/0"),
            Err(FilterSyntaxError::Empty(_))
        ));
    }

    #[test]
    fn what_perf_records_reads_back() {
        let r = [
            FilterRange {
                action: FilterAction::Filter,
                offset: 0x4f0,
                size: 0x20,
                file: Some("/usr/bin/app".into()),
            },
            FilterRange {
                action: FilterAction::Stop,
                offset: 0xffff_ffff_8100_0000,
                size: 0x100,
                file: None,
            },
        ];
        let text = kernel_string(&r);
        assert_eq!(
            text,
            "filter 0x4f0/0x20@/usr/bin/app,stop 0xffffffff81000000/0x100"
        );
        let back = parse(&text).unwrap();
        assert_eq!(back[0].start, FilterStart::Address(0x4f0));
        assert_eq!(back[1].file, None);
        assert_eq!(
            back.iter().map(|b| b.action).collect::<Vec<_>>(),
            [FilterAction::Filter, FilterAction::Stop]
        );
    }

    #[test]
    fn ranges_land_where_the_file_is_mapped() {
        let map = |start, offset, path| MappedFile {
            start,
            len: 0x1000,
            offset,
            path,
        };
        let maps = [map(0x5000, 0, "/bin/b"), map(0x7000, 0x1000, "/bin/a")];
        assert_eq!(
            place(0x1100, 0x40, Some("/bin/a"), maps),
            [(0x7100, 0x7140)]
        );
        assert!(place(0x2100, 0x40, Some("/bin/a"), maps).is_empty());
        assert!(place(0x1100, 0x40, Some("/bin/a"), []).is_empty());
        assert_eq!(place(0x10, 0x4, None, []), [(0x10, 0x14)]);
    }
}
