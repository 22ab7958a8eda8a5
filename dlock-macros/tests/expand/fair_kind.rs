async fn serve(id: u64) -> Result<(), AppError> {
    let __dlock_key: ::std::string::String = ::std::format!("queue:{}", id);
    let __dlock_acquired = ::dlock::__private::acquire(
            ::dlock::__private::global_client_for(
                ::core::concat!(::core::module_path!(), "::", "serve"),
            ),
            ::dlock::__private::Kind::Fair,
            "queue:<id>",
            __dlock_key,
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
