async fn query(name: &str) -> Result<u64, AppError> {
    const _: () = ::core::assert!(
        ::dlock::__private::lease_fits(30u64, 0u32),
        "`lease` is longer than `dlock::limits::MAX_LEASE`; leave `lease` out to use the watchdog"
    );
    let __dlock_key: ::std::string::String = ::std::format!("pool:{}", name);
    let __dlock_acquired = ::dlock::__private::acquire(
            ::dlock::__private::global_client_for(
                ::core::concat!(::core::module_path!(), "::", "query"),
            ),
            ::dlock::__private::Kind::Permits(4u32),
            "pool:<name>",
            __dlock_key,
            ::core::option::Option::None,
            ::core::option::Option::Some(::core::time::Duration::new(30u64, 0u32)),
        )
        .await;
    let __dlock_guard = match __dlock_acquired {
        ::core::result::Result::Ok(__dlock_guard) => __dlock_guard,
        ::core::result::Result::Err(__dlock_error) => {
            return ::dlock::__private::lock_failure(__dlock_error);
        }
    };
    let __dlock_run = ::dlock::__private::run_cancelling(
            &__dlock_guard,
            ::dlock::__private::typed_body::<
                Result<u64, AppError>,
                _,
            >(async move { Ok(1) }),
        )
        .await;
    ::dlock::__private::Guard::release(__dlock_guard).await;
    match __dlock_run {
        ::core::result::Result::Ok(__dlock_output) => __dlock_output,
        ::core::result::Result::Err(
            ::dlock::__private::Lost {
                output: ::core::option::Option::Some(
                    __dlock_output @ ::core::result::Result::Err(_),
                ),
                ..
            },
        ) => __dlock_output,
        ::core::result::Result::Err(
            ::dlock::__private::Lost { error: __dlock_error, .. },
        ) => ::dlock::__private::lock_failure(__dlock_error),
    }
}
