use dlock::{distributed_lock, LockError};

// `{id}` is literal text (a Redis Cluster hash tag), not the parameter.
#[distributed_lock(key = "order:{id}")]
async fn pay(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
