use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "goods:<id>", kind = "exclusive")]
async fn buy(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
