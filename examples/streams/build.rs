//! The client of `fixtures/streams.yaml`, generated into `OUT_DIR`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    idem_codegen::build::compile("../../fixtures/streams.yaml")?;
    Ok(())
}
