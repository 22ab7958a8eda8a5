use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "goods:<id>", leese = "5s")]
async fn buy(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
