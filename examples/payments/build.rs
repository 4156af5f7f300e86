//! One spec, three products: the server the demo runs, the client it
//! charges through, and the docs page it writes out.

use idem_codegen::build::Config;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::var("OUT_DIR")?;
    Config::new()
        .client(true)
        .server(true)
        .file_name("payments")
        .docs_dir(format!("{out}/docs"))
        .compile("../../fixtures/payments.yaml")?;
    Ok(())
}
