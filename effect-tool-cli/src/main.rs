//! The `effect-tool` command. See the crate docs (`effect_tool_cli`) or `effect-tool --help`.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use effect_tool_cli::{Cli, CliError, EXIT_STORE, EXIT_USAGE, Io};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; usage errors to stderr with 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_STORE);
        }
    };
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let mut out = stdout.lock();
    let stdin_terminal = std::io::stdin().is_terminal();
    let mut stdin = std::io::stdin().lock();
    let mut io = Io {
        stdin: &mut stdin,
        out: &mut out,
        terminal,
        stdin_terminal,
    };
    let result = runtime.block_on(effect_tool_cli::run(cli, &mut io));
    let flushed = out.flush();
    match result {
        Ok(()) => match flushed {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: cannot write the output: {e}");
                ExitCode::from(EXIT_STORE)
            }
        },
        // A reader that went away (`effect-tool list | head`) is not an error.
        Err(CliError::OutputClosed) => ExitCode::SUCCESS,
        Err(e) => {
            // Errors carry what the journal and the application wrote (keys, a resolver's
            // name, a store's message): escaped like every other printed string.
            eprintln!("error: {}", effect_tool_cli::output::clean(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}
