use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "pool:<name>", permits = 0)]
async fn zero(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(key = "pool:<name>", permits = "4")]
async fn a_string(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(key = "pool:<name>", permits = 5000000000)]
async fn too_many(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(key = "pool:<name>", permits = 4, kind = "read")]
async fn with_kind(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(keys = ["pool:<name>"], permits = 4)]
async fn with_keys(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

fn main() {}
