use clap::Parser;

fn main() {
    let cli = agent::cli::Cli::parse();
    std::process::exit(agent::cli::dispatch(cli));
}
