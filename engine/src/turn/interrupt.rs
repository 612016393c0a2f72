//! Ctrl-C (SIGINT) once the model is loaded: the first one raises a flag that the token loop
//! checks between tokens — the token in flight is finished, the run ends as if `-n` had been
//! reached, and the summary, the CSV trailer (`interrupted=1`) and the traces are written; the
//! process then exits 130. A second SIGINT before that ends it at once (`_exit(130)`), for a
//! run that does not stop soon enough.
//!
//! Everything here goes through `signal-hook`'s flag actions, which only store to atomics (what
//! a signal handler may do); no thread, no allocation in the handler.

use crate::error::ExitStatus;
use signal_hook::consts::SIGINT;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The SIGINT flag of a run.
#[derive(Debug, Clone)]
pub struct Interrupt {
    flag: Arc<AtomicBool>,
}

impl Interrupt {
    /// Installs the SIGINT actions: a second SIGINT while the flag is raised exits with
    /// [`ExitStatus::Interrupted`]'s code (130); each SIGINT raises the flag and every flag of `also` (a session
    /// raises the context's abort flag, so the decode in flight stops as at a `cancel`).
    ///
    /// # Errors
    /// The OS refused the handler.
    pub fn install(also: &[Arc<AtomicBool>]) -> std::io::Result<Interrupt> {
        let flag = Arc::new(AtomicBool::new(false));
        // the order matters: the exit is registered first, so it sees the flag as the previous
        // SIGINT left it (signal-hook runs a signal's actions in registration order)
        signal_hook::flag::register_conditional_shutdown(
            SIGINT,
            i32::from(ExitStatus::Interrupted.code()),
            Arc::clone(&flag),
        )?;
        signal_hook::flag::register(SIGINT, Arc::clone(&flag))?;
        for a in also {
            signal_hook::flag::register(SIGINT, Arc::clone(a))?;
        }
        Ok(Interrupt { flag })
    }

    /// Whether a SIGINT arrived since the install or the last [`Self::rearm`].
    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Lowers the flag: the next SIGINT is a first one again (a session goes on after it).
    pub fn rearm(&self) {
        self.flag.store(false, Ordering::SeqCst);
    }
}
