//! `kubectl-upgradeplan`: see `kubectl upgradeplan --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = kubectl_upgradeplan::cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(kubectl_upgradeplan::run(cli)) {
        Ok(code) => code,
        // `| head -1` closed stdout: end quietly, as kubectl does.
        Err(e) if kubectl_upgradeplan::output::is_closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
