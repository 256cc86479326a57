//! Links Debian's libxml2, libxslt and libexslt through pkg-config and compiles the tiny C shim
//! that turns libxml2's printf-style error callbacks into plain strings (stable Rust cannot
//! define a C variadic function).

fn main() {
    let mut include_paths = Vec::new();
    for (name, min) in [
        ("libxml-2.0", "2.9"),
        ("libxslt", "1.1"),
        ("libexslt", "0.8"),
    ] {
        match pkg_config::Config::new().atleast_version(min).probe(name) {
            Ok(lib) => include_paths.extend(lib.include_paths),
            Err(err) => panic!(
                "busbar-libxml needs {name} >= {min} (Debian: apt-get install libxml2-dev \
                 libxslt1-dev pkg-config): {err}"
            ),
        }
    }
    let mut shim = cc::Build::new();
    shim.file("src/shim.c").warnings(true).extra_warnings(true);
    for path in &include_paths {
        shim.include(path);
    }
    shim.compile("busbar_libxml_shim");
    println!("cargo:rerun-if-changed=src/shim.c");
}
