//! `upgradeplan-controller`: executes UpgradePlans and UpgradeRuns in a cluster.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "upgradeplan-controller",
    version,
    about = "Executes UpgradePlans and UpgradeRuns (platform.syntasso.io/v1alpha1)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions this controller serves (YAML), or write one file per CRD.
    ///
    /// `make crds` runs `upgradeplan-controller crd --output-dir deploy/crds`.
    Crd {
        /// Write `<plural>.<group>.yaml` files into this directory instead of printing to stdout.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd { output_dir } => write_crds(output_dir),
    }
}

fn write_crds(output_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let files = upgradeplan::crd::crd_files();
    match output_dir {
        None => {
            for (_, yaml) in files {
                print!("{yaml}");
            }
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, yaml) in files {
                let path = dir.join(name);
                std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}
