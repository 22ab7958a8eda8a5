async fn report(day: u32) -> u64 {
    let __dlock_key: ::std::string::String = ::std::format!("report:{}", day);
    let __dlock_acquired = ::dlock::__private::acquire(
            ::dlock::__private::global_client_for(
                ::core::concat!(::core::module_path!(), "::", "report"),
            ),
            ::dlock::__private::Kind::Reentrant,
            "report:<day>",
            __dlock_key,
            ::core::option::Option::None,
            ::core::option::Option::None,
        )
        .await;
    let __dlock_guard = match __dlock_acquired {
        ::core::result::Result::Ok(__dlock_guard) => __dlock_guard,
        ::core::result::Result::Err(__dlock_error) => return gave_up(__dlock_error),
    };
    let __dlock_run = ::dlock::__private::run_to_end(
            &__dlock_guard,
            ::dlock::__private::typed_body::<u64, _>(async move { 1 }),
        )
        .await;
    ::dlock::__private::Guard::release(__dlock_guard).await;
    match __dlock_run {
        ::core::result::Result::Ok(__dlock_output) => __dlock_output,
        ::core::result::Result::Err(
            ::dlock::__private::Lost { error: __dlock_error, .. },
        ) => gave_up(__dlock_error),
    }
}
