//! Symbol names as compilers mangle them, made readable: Rust (legacy and
//! v0), C++ (Itanium) and OCaml. The decoder names functions with it and
//! capture matches trigger names with it, so a name the viewer shows is a
//! name a trigger accepts.

use std::borrow::Cow;
use std::fmt;

/// Demangled C++ names longer than this are kept mangled: a hostile name
/// can expand exponentially through substitutions.
const MAX_DEMANGLED: usize = 64 * 1024;

/// Demangles Rust (legacy and v0, without the hash suffix), C++ (Itanium)
/// and OCaml symbol names; anything else comes back unchanged. A version
/// or `@plt` suffix (`name@...`) is kept after the demangled name.
pub fn demangle(name: &str) -> Cow<'_, str> {
    let (base, suffix) = match name.split_once('@') {
        Some((base, _)) if !base.is_empty() => (base, &name[base.len()..]),
        _ => (name, ""),
    };
    match demangle_base(base) {
        Some(mut d) => {
            d.push_str(suffix);
            Cow::Owned(d)
        }
        None => Cow::Borrowed(name),
    }
}

fn demangle_base(name: &str) -> Option<String> {
    let is_rust_v0 = name.starts_with("_R") || name.starts_with("__R");
    let is_itanium = name.starts_with("_Z") || name.starts_with("__Z");
    if is_rust_v0 || name.starts_with("_ZN") || name.starts_with("__ZN") {
        // Legacy Rust uses the C++ `_ZN...E` form: rustc-demangle rejects
        // real C++ signatures (parameter types after the `E`).
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return Some(format!("{d:#}"));
        }
    }
    if is_itanium {
        return demangle_cpp(name);
    }
    name.strip_prefix("caml").and_then(demangle_ocaml)
}

fn demangle_cpp(name: &str) -> Option<String> {
    /// Stops the demangler once the output grows past `MAX_DEMANGLED`.
    struct Bounded(String);
    impl fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            if self.0.len() + s.len() > MAX_DEMANGLED {
                return Err(fmt::Error);
            }
            self.0.push_str(s);
            Ok(())
        }
    }
    let sym = cpp_demangle::Symbol::new(name.as_bytes()).ok()?;
    let mut out = Bounded(String::new());
    sym.structured_demangle(&mut out, &cpp_demangle::DemangleOptions::default())
        .ok()?;
    Some(out.0)
}

/// OCaml native symbols: `caml` + module + `__` + name + `_NNN` (4.x), or
/// `caml` + `Module.name_NNN` (5.x); `__` separates modules and `$xx` is a
/// hex-escaped byte.
fn demangle_ocaml(rest: &str) -> Option<String> {
    let b = rest.as_bytes();
    if !b.first()?.is_ascii_uppercase() {
        return None;
    }
    let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'_' && b.get(i + 1) == Some(&b'_') {
            out.push(b'.');
            i += 2;
        } else if let (b'$', Some(hi), Some(lo)) = (c, hex(b.get(i + 1)), hex(b.get(i + 2))) {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_cpp_ocaml() {
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        // v0: `<i32 as Foo>::bar`-style paths without the crate hash.
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(
            demangle("_RNvMNtCs1234_7mycrate3modNtB2_6Widget4draw"),
            "<mycrate::mod::Widget>::draw"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("_ZN2ns6Widget4drawEi"), "ns::Widget::draw(int)");
        assert_eq!(demangle("_ZN3foo3barEv@plt"), "foo::bar()@plt");
        assert_eq!(
            demangle("camlRaise_test__raise_after_265"),
            "Raise_test.raise_after_265"
        );
        assert_eq!(
            demangle("camlRaise_test.raise_after_265"),
            "Raise_test.raise_after_265"
        );
        assert_eq!(demangle("camlStdlib__List__map_123"), "Stdlib.List.map_123");
        assert_eq!(demangle("camlFoo__$3e$3e_12"), "Foo.>>_12");
        for plain in [
            "main",
            "caml_alloc",
            "printf@plt",
            "_Zgarbage",
            "",
            "@",
            "_R",
            "caml",
        ] {
            assert_eq!(demangle(plain), plain);
        }
    }
}
