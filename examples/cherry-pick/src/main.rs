//! Drives one source-first handoff by hand and prints each step; exits
//! non-zero unless both cores end drained.

use std::process::ExitCode;

fn main() -> ExitCode {
    match cherry_pick_example::run(2000, 16, &mut |line| println!("{line}")) {
        Ok(o) if o.drained => {
            println!(
                "cherry-pick-example: ok: pinned {} blocks until the reader completed, reserved {} then active on decode, {} tokens, both cores drained",
                o.pinned_blocks, o.reserved_blocks, o.tokens
            );
            ExitCode::SUCCESS
        }
        Ok(o) => {
            eprintln!("cherry-pick-example: a core is not drained: {o:?}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("cherry-pick-example: {e}");
            ExitCode::FAILURE
        }
    }
}
