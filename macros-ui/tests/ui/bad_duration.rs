use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "goods:<id>", wait = "5 parsecs")]
async fn buy(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
