use dlock::distributed_lock;

#[distributed_lock(key = "goods")]
struct Goods;

fn main() {}
