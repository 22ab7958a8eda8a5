use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "goods:<idd>")]
async fn buy(id: u64, qty: u32) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
