async fn transfer(from: u64, to: u64, amount: u64) -> Result<(), AppError> {
    let __dlock_keys: ::std::vec::Vec<::std::string::String> = ::std::vec![
        ::std::format!("account:{}", from), ::std::format!("account:{}", to)
    ];
    let __dlock_acquired = ::dlock::__private::acquire_all(
            ::dlock::__private::global_client_for(
                ::core::concat!(::core::module_path!(), "::", "transfer"),
            ),
            "account:<from>, account:<to>",
            __dlock_keys,
            ::core::option::Option::Some(::core::time::Duration::new(2u64, 0u32)),
            ::core::option::Option::None,
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
                Result<(), AppError>,
                _,
            >(async move { Ok(()) }),
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
