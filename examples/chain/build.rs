//! The chain's server and client, from one spec.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    idem_codegen::build::Config::new()
        .client(true)
        .server(true)
        .file_name("chain")
        .compile("../../fixtures/chain.yaml")?;
    Ok(())
}
