::core::compile_error! {
    "unknown placeholder `idd` in key; parameters: `id`"
}
async fn buy(id: u64) -> Result<(), E> {
    Ok(())
}
