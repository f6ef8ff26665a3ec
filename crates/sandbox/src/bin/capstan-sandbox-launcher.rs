fn main() {
    capstan_sandbox::maybe_run_launcher();
    eprintln!("capstan-sandbox-launcher: run by capstan-sandbox only");
    std::process::exit(2);
}
