use dlock::{distributed_lock, LockError, redlock::RedLockClient};

#[distributed_lock(key = "a:<id>", min_hold = "1s", client = locks)]
async fn on_a_redlock(locks: &RedLockClient, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
