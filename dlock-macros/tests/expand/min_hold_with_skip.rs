async fn tick(name: &str) {
    const _: () = ::core::assert!(
        ::dlock::__private::lease_fits(50u64, 0u32),
        "`min_hold` is longer than `dlock::limits::MAX_LEASE`, the longest a lock can be kept"
    );
    let __dlock_key: ::std::string::String = ::std::format!("job:{}", name);
    let __dlock_acquired = ::dlock::__private::acquire_or_skip(
            ::dlock::__private::global_client_for(
                ::core::concat!(::core::module_path!(), "::", "tick"),
            ),
            ::dlock::__private::Kind::Reentrant,
            "job:<name>",
            __dlock_key,
            ::core::option::Option::None,
        )
        .await;
    let __dlock_guard = match __dlock_acquired {
        ::core::result::Result::Ok(::core::option::Option::Some(__dlock_guard)) => {
            __dlock_guard
        }
        ::core::result::Result::Ok(::core::option::Option::None) => return,
        ::core::result::Result::Err(__dlock_error) => {
            return {
                ::dlock::__private::skipped_on_failure(
                    ::core::concat!(::core::module_path!(), "::", "tick"),
                    &__dlock_error,
                );
            };
        }
    };
    let __dlock_hold_end = ::dlock::__private::min_hold_end(
        ::core::time::Duration::new(50u64, 0u32),
    );
    let __dlock_run = ::dlock::__private::run_cancelling(
            &__dlock_guard,
            ::dlock::__private::typed_body::<(), _>(async move {}),
        )
        .await;
    ::dlock::__private::HoldAfterExit::release_at(__dlock_guard, __dlock_hold_end).await;
    match __dlock_run {
        ::core::result::Result::Ok(__dlock_output) => __dlock_output,
        ::core::result::Result::Err(
            ::dlock::__private::Lost { error: __dlock_error, .. },
        ) => {
            ::dlock::__private::skipped_on_failure(
                ::core::concat!(::core::module_path!(), "::", "tick"),
                &__dlock_error,
            );
        }
    }
}
