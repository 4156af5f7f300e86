//! The `idem` binary: a shim over [`idem_codegen::cli::run_with`].

fn main() {
    let code = idem_codegen::cli::run_with(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
        idem_codegen::cli::Terminals::detect(),
    );
    std::process::exit(code);
}
