use dlock_core::distributed_lock;

#[distributed_lock(key = "goods")]
struct Goods;

fn main() {}
