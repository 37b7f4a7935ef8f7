//! This module reads IP filters in perf's syntax and resolves them, for both
//! backends. A filter limits tracing to address ranges of a binary: PT
//! hardware writes packets only while the IP is inside one of the ranges
//! (FilterEn), and TIP.PGD / TIP.PGE where execution leaves and re-enters
//! them.
//!
//! The syntax is perf's `--filter` for intel_pt address filters, several
//! separated by commas:
//! `filter <start> [/ <size>] [@<file name>]`, where `<start>` is an address
//! (a file offset, as the kernel reads it) or a function's name (then
//! `<size>` defaults to the function's size). A
//! filter without a file applies to the traced program's own binary.
//! `tracestop` (or `stop`) ranges take the same form: where a branch lands
//! in one, the hardware stops tracing (TraceStop) until the thread is next
//! scheduled in. Both kinds share the CPU's address ranges. The syntax
//! itself is read by [`ptscope_formats::filter`], which decoders use to
//! read it back.
//!
//! A resolved filter is a file offset and size in a file, as the kernel takes
//! it (`PERF_EVENT_IOC_SET_FILTER`) and as perf records it in
//! AUXTRACE_INFO; [`runtime_ranges`] places it where the file is mapped.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol};

use crate::procfs::Mapping;
use crate::recording::Target;
use crate::trigger::symbol_matches;

pub use crate::error::FilterError;

pub use ptscope_formats::{
    filter::kernel_string, filter::FilterAction, filter::FilterRange, filter::FilterSpec,
    filter::FilterStart, filter::FilterSyntaxError,
};

impl From<FilterSyntaxError> for FilterError {
    fn from(e: FilterSyntaxError) -> FilterError {
        match e {
            FilterSyntaxError::Syntax { filter, why } => FilterError::Syntax { filter, why },
            FilterSyntaxError::Action(a) => FilterError::Action(a),
            FilterSyntaxError::Empty(f) => FilterError::Empty(f),
        }
    }
}

/// Parses a `--filter` value: one or more `filter` or `tracestop` ranges
/// separated by commas.
pub fn parse(text: &str) -> Result<Vec<FilterSpec>, FilterError> {
    Ok(ptscope_formats::filter::parse(text)?)
}

/// The file offset and size of the function `name` in the ELF file at
/// `path`; the size is the symbol's.
pub fn symbol_in_file(path: &Path, name: &str) -> Result<Option<(u64, u64)>, FilterError> {
    let file_err = |why: String| FilterError::File {
        file: path.display().to_string(),
        why,
    };
    let data = std::fs::read(path).map_err(|e| file_err(e.to_string()))?;
    let file = object::File::parse(&*data).map_err(|e| file_err(e.to_string()))?;
    let Some(sym) = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
        .find(|s| s.name().is_ok_and(|n| symbol_matches(n, name)))
    else {
        return Ok(None);
    };
    Ok(vaddr_to_offset(&file, sym.address()).map(|off| (off, sym.size())))
}

fn vaddr_to_offset(file: &object::File, vaddr: u64) -> Option<u64> {
    file.segments().find_map(|seg| {
        let (off, size) = seg.file_range();
        let start = seg.address();
        (vaddr >= start && vaddr < start + size).then(|| vaddr - start + off)
    })
}

/// The binary a filter without a file applies to: the spawned command's
/// program, or the attached process's executable.
pub fn target_program(target: &Target) -> Option<PathBuf> {
    match target {
        Target::Spawn { argv, cwd } => {
            crate::tracee::resolve_program(argv.first()?, cwd.as_deref())
        }
        Target::Attach(pid) => std::fs::read_link(format!("/proc/{pid}/exe")).ok(),
    }
}

/// Refuses more ranges than the CPU's `max` address ranges.
pub fn check_count(ranges: &[FilterRange], max: usize) -> Result<(), FilterError> {
    if ranges.len() > max {
        return Err(FilterError::TooMany {
            given: ranges.len(),
            max,
        });
    }
    Ok(())
}

/// Resolves `specs` into ranges of files; a filter without a file is in
/// `program`'s binary, or (an address without a file and no program) at a
/// runtime address.
pub fn resolve(
    specs: &[FilterSpec],
    program: Option<&Path>,
) -> Result<Vec<FilterRange>, FilterError> {
    specs
        .iter()
        .map(|spec| {
            let file = spec
                .file
                .clone()
                .or_else(|| program.map(|p| p.display().to_string()));
            let Some(file) = file else {
                let FilterStart::Address(a) = spec.start else {
                    return Err(FilterError::File {
                        file: "(no file)".into(),
                        why: "a symbol filter needs a file".into(),
                    });
                };
                return Ok(FilterRange {
                    action: spec.action,
                    offset: a,
                    size: spec.size.unwrap_or(0),
                    file: None,
                });
            };
            let path = std::fs::canonicalize(&file).map_err(|e| FilterError::File {
                file: file.clone(),
                why: e.to_string(),
            })?;
            let (offset, size) = match &spec.start {
                FilterStart::Symbol(name) => {
                    let (off, sym_size) =
                        symbol_in_file(&path, name)?.ok_or_else(|| FilterError::UnknownSymbol {
                            symbol: name.clone(),
                            file: path.display().to_string(),
                        })?;
                    (off, spec.size.unwrap_or(sym_size))
                }
                FilterStart::Address(a) => (*a, spec.size.unwrap_or(0)),
            };
            if size == 0 {
                return Err(FilterError::Empty(format!("{:?}", spec.start)));
            }
            Ok(FilterRange {
                action: spec.action,
                offset,
                size,
                file: Some(path.display().to_string()),
            })
        })
        .collect()
}

/// Where `ranges` lie in a process mapped as `maps`: [start, end) runtime
/// address ranges (see [`ptscope_formats::filter::place`]).
pub fn runtime_ranges(ranges: &[FilterRange], maps: &[Mapping]) -> Vec<(u64, u64)> {
    ranges
        .iter()
        .flat_map(|r| {
            let mapped =
                maps.iter()
                    .filter(|m| m.exec)
                    .map(|m| ptscope_formats::filter::MappedFile {
                        start: m.start,
                        len: m.len(),
                        offset: m.offset,
                        path: &m.path,
                    });
            ptscope_formats::filter::place(r.offset, r.size, r.file.as_deref(), mapped)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_and_tracestop_ranges_are_taken() {
        assert_eq!(parse("filter main").unwrap().len(), 1);
        let both = parse("filter main, tracestop foo").unwrap();
        assert_eq!(both[1].action, FilterAction::Stop);
        assert_eq!(
            parse("filter main, start foo").unwrap_err(),
            FilterError::Action("start".into())
        );
        assert!(parse("frob main")
            .unwrap_err()
            .to_string()
            .contains("must begin"));
        assert!(matches!(parse("filter 0x10/0"), Err(FilterError::Empty(_))));
    }

    fn this_binary() -> std::path::PathBuf {
        std::env::current_exe().unwrap()
    }

    #[test]
    fn resolves_symbols_and_counts_ranges() {
        let exe = this_binary();
        let specs = parse("filter main").unwrap();
        let r = resolve(&specs, Some(&exe)).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].size > 0);
        let s = kernel_string(&r);
        assert!(s.starts_with("filter 0x") && s.contains('@'), "{s}");
        let e = resolve(&parse("filter no_such_fn_ptscope").unwrap(), Some(&exe));
        assert!(
            matches!(&e, Err(FilterError::UnknownSymbol { symbol, .. }) if symbol == "no_such_fn_ptscope"),
            "{e:?}"
        );
        let three = parse("filter main, filter main, filter main").unwrap();
        let three = resolve(&three, Some(&exe)).unwrap();
        assert_eq!(
            check_count(&three, 2).unwrap_err(),
            FilterError::TooMany { given: 3, max: 2 }
        );
        assert!(check_count(&three[..2], 2).is_ok());
        assert!(matches!(
            resolve(&specs, Some(Path::new("/nonexistent/x"))),
            Err(FilterError::File { .. })
        ));
    }

    #[test]
    fn ranges_land_where_the_file_is_mapped() {
        let r = [FilterRange {
            action: FilterAction::Filter,
            offset: 0x1100,
            size: 0x40,
            file: Some("/bin/a".into()),
        }];
        let map = |start, offset, path: &str| Mapping {
            start,
            end: start + 0x1000,
            read: true,
            write: false,
            exec: true,
            offset,
            dev_major: 0,
            dev_minor: 0,
            inode: 1,
            path: path.into(),
        };
        assert_eq!(
            runtime_ranges(
                &r,
                &[map(0x5000, 0, "/bin/b"), map(0x7000, 0x1000, "/bin/a")]
            ),
            [(0x7100, 0x7140)]
        );
        assert!(runtime_ranges(&r, &[]).is_empty());
    }
}
