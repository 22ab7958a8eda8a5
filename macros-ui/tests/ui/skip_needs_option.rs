use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "a:<id>", on_busy = "skip")]
async fn plain_result(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "b:<id>", on_busy = "skip")]
async fn a_number(id: u64) -> u64 {
    id
}

fn main() {}
