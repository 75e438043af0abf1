//! Child processes the bench starts (peer servers, live traffic, busy neighbours) must not
//! outlive it: held here, they are killed and reaped on drop, whichever way the run ends.

use std::process::Child;

/// Processes killed and reaped when dropped.
#[derive(Debug, Default)]
pub struct Children(pub Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
