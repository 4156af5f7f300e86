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
    Ok(())
}
