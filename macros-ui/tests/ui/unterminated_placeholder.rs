use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "goods:<id")]
async fn buy(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
