//! Generates the client and the server of every fixture through the
//! build.rs front end,
//! so the crate compiling (warnings denied) is the compile test of the
//! generated code, and clippy on the workspace lints it.

use idem_codegen::build::Config;
use idem_codegen::model::Selection;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fixtures = "../../fixtures";
    for (file, name, allow_findings) in [
        ("shop.yaml", "shop", false),
        ("payments-clean.yaml", "payments", false),
        // Every validation keyword and typed format.
        ("constraints.yaml", "constraints", false),
        // `scope: credential`: keys scoped by a digest of the bearer token.
        ("bearer.yaml", "bearer", false),
        // These two carry audit errors on purpose.
        ("cratebase.yaml", "cratebase", true),
        ("hostile-names.yaml", "hostile", true),
        // `in-flight: accepted`: the server mounts the key status resource.
        ("docs-hostile.yaml", "docs_hostile", true),
        // Lists that page in each common way, server-sent events, a download.
        ("streams.yaml", "streams", false),
        // Raw-byte bodies the handler reads as they arrive.
        ("uploads.yaml", "uploads", false),
        // Keys the spec describes in words: a body field, a query parameter.
        ("described-keys.yaml", "described_keys", true),
        // A spec in prose only: the PUT that adds, the DELETE that refunds.
        ("hotel.yaml", "hotel", true),
        // A base path, shared error responses, an undeclared path segment.
        ("staybright.yaml", "staybright", false),
    ] {
        Config::new()
            .server(true)
            .file_name(name)
            .allow_findings(allow_findings)
            .compile(format!("{fixtures}/{file}"))?;
    }
    // Part of an API: the `orders` tag, and the schemas it reaches.
    Config::new()
        .server(true)
        .file_name("tagged_orders")
        .only(Selection::tags(["orders"]))
        .compile(format!("{fixtures}/tagged.yaml"))?;
    directory(fixtures)
}

/// One module per document of `fixtures/directory/`: the minimal cases of
/// what real specs broke, each compiled client and server, warnings denied.
fn directory(fixtures: &str) -> Result<(), Box<dyn std::error::Error>> {
    let folder = std::path::Path::new(fixtures).join("directory");
    println!("cargo:rerun-if-changed={}", folder.display());
    let mut files: Vec<_> = std::fs::read_dir(&folder)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut index = String::new();
    for file in files {
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().replace('-', "_"))
            .unwrap_or_default();
        let name = format!("directory_{stem}");
        Config::new().server(true).file_name(&name).compile(&file)?;
        index.push_str(&format!(
            "/// `fixtures/directory/{}`.\npub mod {stem} {{\n    ::idem_runtime::include_api!({name:?});\n}}\n",
            file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
        ));
    }
    let out = std::env::var("OUT_DIR")?;
    std::fs::write(std::path::Path::new(&out).join("directory.rs"), index)?;
    Ok(())
}
