use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "account:<from>", keys = ["account:<from>", "account:<to>"])]
async fn both(from: u64, to: u64) -> Result<(), LockError> {
    let _ = (from, to);
    Ok(())
}

#[distributed_lock(keys = "account:<from>")]
async fn not_an_array(from: u64) -> Result<(), LockError> {
    let _ = from;
    Ok(())
}

#[distributed_lock(keys = [])]
async fn empty() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["account:<from>", to])]
async fn not_a_string(from: u64, to: u64) -> Result<(), LockError> {
    let _ = (from, to);
    Ok(())
}

#[distributed_lock(keys = ["account:<from>", "account:<too>"])]
async fn unknown_placeholder(from: u64, to: u64) -> Result<(), LockError> {
    let _ = (from, to);
    Ok(())
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], kind = "fair")]
async fn with_kind(from: u64, to: u64) -> Result<(), LockError> {
    let _ = (from, to);
    Ok(())
}

fn main() {}
