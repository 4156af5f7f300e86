//! `idem` run in-process through `cli::run`, the code the binary runs.

/// What one run printed, and its exit code.
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Run `idem ARGS…`.
pub fn idem(args: &[&str]) -> Output {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv = std::iter::once("idem").chain(args.iter().copied());
    let code = idem_codegen::cli::run(argv, &mut out, &mut err);
    Output {
        code,
        stdout: String::from_utf8(out).unwrap_or_else(|e| panic!("stdout is not UTF-8: {e}")),
        stderr: String::from_utf8(err).unwrap_or_else(|e| panic!("stderr is not UTF-8: {e}")),
    }
}
