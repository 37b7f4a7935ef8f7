//! The kernel's symbols for a snapshot of a kernel trace: copies of
//! `/proc/kallsyms` and `/proc/modules` taken at capture, so that the
//! decoder names kernel code on any machine. `/proc/kallsyms` lists every
//! address as zero to a reader `kernel.kptr_restrict` hides them from; such
//! a copy names nothing, so it is not taken, and the reason is kept for
//! `ptscope info`.

use std::path::Path;

/// The standard places of the two files.
pub(crate) const KALLSYMS: &str = "/proc/kallsyms";
pub(crate) const MODULES: &str = "/proc/modules";

/// What a capture carries of the kernel's symbols.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KernelFiles {
    /// `/proc/kallsyms`, when readable and its addresses are real.
    pub kallsyms: Option<Vec<u8>>,
    /// `/proc/modules`, when readable (a kernel without modules has none).
    pub modules: Option<Vec<u8>>,
    /// Why `kallsyms` is `None`.
    pub kallsyms_missing: Option<String>,
}

impl KernelFiles {
    /// Reads the kernel's symbols from `kallsyms` and its modules from
    /// `modules` (normally [`KALLSYMS`] and [`MODULES`]; tests point them at
    /// files of their own).
    pub(crate) fn read(kallsyms: &Path, modules: &Path) -> KernelFiles {
        let mut out = KernelFiles {
            modules: std::fs::read(modules).ok().filter(|d| !d.is_empty()),
            ..KernelFiles::default()
        };
        match std::fs::read(kallsyms) {
            Err(e) => {
                out.kallsyms_missing = Some(format!(
                    "{} is not readable ({e}): kernel code is named [kernel]",
                    kallsyms.display()
                ))
            }
            Ok(data) if !has_addresses(&data) => {
                out.kallsyms_missing = Some(format!(
                    "{} hides its addresses (all zero: kernel.kptr_restrict is set, or the capture \
                     lacked CAP_SYSLOG): kernel code is named [kernel]; capture with \
                     `sysctl kernel.kptr_restrict=0`, or as root, to name it",
                    kallsyms.display()
                ))
            }
            Ok(data) => out.kallsyms = Some(data),
        }
        out
    }
}

/// Whether a kallsyms listing holds any non-zero address: with
/// `kptr_restrict` in force every line reads `0000000000000000 T name`.
fn has_addresses(data: &[u8]) -> bool {
    data.split(|&b| b == b'\n').any(|line| {
        let addr = line.split(|&b| b == b' ').next().unwrap_or_default();
        !addr.is_empty()
            && addr.iter().all(u8::is_ascii_hexdigit)
            && addr.iter().any(|&b| b != b'0')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_kallsyms_is_carried_with_the_modules() {
        let dir = tempfile::tempdir().unwrap();
        let ks = dir.path().join("kallsyms");
        let mods = dir.path().join("modules");
        let text = "ffffffff81000000 T _text\nffffffff81000100 T do_syscall_64\n\
                    ffffffffc0001000 t foo_read\t[foo]\n";
        std::fs::write(&ks, text).unwrap();
        std::fs::write(&mods, "foo 16384 0 - Live 0xffffffffc0001000\n").unwrap();
        let k = KernelFiles::read(&ks, &mods);
        assert_eq!(k.kallsyms.as_deref(), Some(text.as_bytes()));
        assert!(k.modules.is_some());
        assert_eq!(k.kallsyms_missing, None);
    }

    #[test]
    fn hidden_or_unreadable_kallsyms_is_not_carried_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let ks = dir.path().join("kallsyms");
        std::fs::write(
            &ks,
            "0000000000000000 T _text\n0000000000000000 T do_syscall_64\n",
        )
        .unwrap();
        let k = KernelFiles::read(&ks, &dir.path().join("no-modules"));
        assert_eq!(k.kallsyms, None);
        assert_eq!(k.modules, None);
        let why = k.kallsyms_missing.unwrap();
        assert!(
            why.contains("kptr_restrict") && why.contains("[kernel]"),
            "{why}"
        );
        let gone = dir.path().join("gone");
        let k = KernelFiles::read(&gone, &gone);
        let why = k.kallsyms_missing.unwrap();
        assert!(
            why.contains("not readable") && why.contains("gone"),
            "{why}"
        );
    }
}
