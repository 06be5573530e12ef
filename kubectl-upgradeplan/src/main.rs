//! `kubectl-upgradeplan`: see `kubectl upgradeplan --help`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

fn main() -> ExitCode {
    // An empty KUBECONFIG means unset, as for kubectl (clap would call it a missing value). This
    // runs before any thread exists.
    if std::env::var_os("KUBECONFIG").is_some_and(|v| v.is_empty()) {
        std::env::remove_var("KUBECONFIG");
    }
    // `kubectl upgradeplan` alone teaches: help on stdout, exit 0.
    if std::env::args_os().len() == 1 {
        let help = kubectl_upgradeplan::cli::Cli::command().render_help();
        let text = if std::io::stdout().is_terminal() {
            help.ansi().to_string()
        } else {
            help.to_string()
        };
        let _ = kubectl_upgradeplan::output::out(text);
        return ExitCode::SUCCESS;
    }
    let cli = match kubectl_upgradeplan::cli::Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print and succeed; a usage error is an error like any other.
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(kubectl_upgradeplan::verbs::EXIT_ERROR)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(kubectl_upgradeplan::verbs::EXIT_ERROR);
        }
    };
    match runtime.block_on(kubectl_upgradeplan::run(cli)) {
        Ok(code) => code,
        // `| head -1` closed stdout: end quietly, as kubectl does.
        Err(e) if kubectl_upgradeplan::output::is_closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(kubectl_upgradeplan::verbs::EXIT_ERROR)
        }
    }
}
