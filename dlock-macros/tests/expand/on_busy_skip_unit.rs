async fn run(job: &str) {
    let __dlock_keys: ::std::vec::Vec<::std::string::String> = ::std::vec![
        ::std::format!("a:{}", job), ::std::format!("b:{}", job)
    ];
    let __dlock_acquired = ::dlock::__private::acquire_all_or_skip(
            ::dlock::__private::global_client_for(
                ::core::concat!(::core::module_path!(), "::", "run"),
            ),
            "a:<job>, b:<job>",
            __dlock_keys,
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
                    ::core::concat!(::core::module_path!(), "::", "run"),
                    &__dlock_error,
                );
            };
        }
    };
    let __dlock_run = ::dlock::__private::run_cancelling(
            &__dlock_guard,
            ::dlock::__private::typed_body::<(), _>(async move {}),
        )
        .await;
    ::dlock::__private::Guard::release(__dlock_guard).await;
    match __dlock_run {
        ::core::result::Result::Ok(__dlock_output) => __dlock_output,
        ::core::result::Result::Err(
            ::dlock::__private::Lost { error: __dlock_error, .. },
        ) => {
            ::dlock::__private::skipped_on_failure(
                ::core::concat!(::core::module_path!(), "::", "run"),
                &__dlock_error,
            );
        }
    }
}
