//! `kubectl_complete-upgradeplan`: completion of `kubectl upgradeplan <TAB>` (kubectl ≥ 1.26).
//! kubectl passes the words after `kubectl upgradeplan`, the last one being completed.

use clap::Parser;
use kubectl_upgradeplan::cli::Global;

/// Global flags given before the words, so lookups use the same cluster.
#[derive(Parser)]
#[command(ignore_errors = true, disable_help_flag = true, disable_version_flag = true)]
struct Args {
    #[command(flatten)]
    global: Global,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    words: Vec<String>,
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let global = Args::try_parse_from(std::iter::once("complete".to_string()).chain(raw.iter().cloned()))
        .map(|a| a.global)
        .unwrap_or_else(|_| Args::parse_from(["complete"]).global);
    let (candidates, directive) = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(kubectl_upgradeplan::complete::complete(&raw, &global)),
        Err(_) => (vec![], kubectl_upgradeplan::complete::DIRECTIVE_NO_FILES),
    };
    let mut text: String = candidates.iter().map(|c| format!("{c}\n")).collect();
    text.push_str(&format!(":{directive}\n"));
    // A closed pipe ends it quietly; there is nothing else to say to a shell.
    let _ = kubectl_upgradeplan::output::out(text);
}
