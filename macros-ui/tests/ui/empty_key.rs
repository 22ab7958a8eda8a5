use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "")]
async fn buy(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
