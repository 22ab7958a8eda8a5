use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "goods:<id>", lease = "5s", lease = "10s")]
async fn buy(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
