//! `handoff-mocker`: the one binary ([`handoff_mocker::main`]).

fn main() -> std::process::ExitCode {
    handoff_mocker::main()
}
