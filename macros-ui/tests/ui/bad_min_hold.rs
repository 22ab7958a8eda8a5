use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "a:<id>", lease = "5s", min_hold = "50s")]
async fn longer_than_the_lease(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(keys = ["b:<id>", "c:<id>"], min_hold = "1s")]
async fn with_keys(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "d:<id>", kind = "read", min_hold = "1s")]
async fn with_a_kind(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "e:<id>", permits = 2, min_hold = "1s")]
async fn with_permits(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "f:<id>", min_hold = "0s")]
async fn zero(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "g:<id>", min_hold = "soon")]
async fn not_a_duration(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "h:<id>", min_hold = "400days")]
async fn longer_than_max_lease(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
