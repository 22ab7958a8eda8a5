use dlock::{distributed_lock, LockError};

struct Order {
    id: u64,
}

// lock4j users write `#order.id`; here that is literal text.
#[distributed_lock(key = "order:#order.id")]
async fn pay(order: Order) -> Result<(), LockError> {
    let _ = order.id;
    Ok(())
}

fn main() {}
