fn main() -> std::process::ExitCode {
    // Must run before any thread exists: when this process was started as the
    // sandbox launcher, this applies the sandbox and never returns.
    capstan_sandbox::maybe_run_launcher();
    capstan::frontends::cli::main()
}
