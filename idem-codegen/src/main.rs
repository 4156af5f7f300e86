//! The `idem` binary: a shim over [`idem_codegen::cli::run_with`].

// Generating a large API allocates and frees tens of millions of small
// tokens: with mimalloc, graph-beta's 47 MB spec generates in 38 s and
// 3.1 GB, against 69 s and 3.6 GB with the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let code = idem_codegen::cli::run_with(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
        idem_codegen::cli::Terminals::detect(),
    );
    std::process::exit(code);
}
