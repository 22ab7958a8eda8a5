use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "a:<id>", on_lost = "abort")]
async fn unknown_value(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "b:<id>", on_lost = cancel)]
async fn not_a_string(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "c:<id>", on_lost = "Cancel")]
async fn wrong_case(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
