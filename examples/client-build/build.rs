//! The one-line front end: audit `shop.yaml` (the build fails on an audit
//! error) and write its client to `OUT_DIR/idem_api.rs`, only when changed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    idem_codegen::build::compile("../../fixtures/shop.yaml")?;
    Ok(())
}
