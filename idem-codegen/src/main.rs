//! The `idem` binary: a shim over [`idem_codegen::cli::run`].

fn main() {
    let code = idem_codegen::cli::run(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
