use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "goods:<id>", lease = "367days")]
async fn buy(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
